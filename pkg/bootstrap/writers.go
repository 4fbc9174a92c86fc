package bootstrap

// What a replica writes to the API server, and why each write is where it
// is. Every replica serves xDS, the CA and the webhooks; several replicas
// run side by side behind one Service, so a write that more than one of
// them could make is either the leader's alone or safe for all to race on.
//
// The leader only (the holder of the Lease, registered with leaderOnly):
//   - Ingress status addresses and Ingress problem Events (ingress.go):
//     replicas would otherwise send each Event N times and race on status.
//   - istio-ca-root-cert in every namespace (meshCA.publishRoot).
//
// The revision's leader only (the holder of the per-revision Lease
// meshpilot-webhook-cabundle-<revision or "default">, registered with
// revisionLeaderOnly):
//   - The caBundle of this revision's webhook configurations
//     (webhooks.patchBundles). Revisions side by side share the first
//     Lease, whose holder patches only its own revision's webhooks; under
//     that Lease alone the other revisions' injectors and validators
//     would never trust the root, and every admission call to them would
//     fail its TLS handshake.
//
// istio-ca-root-cert and the caBundle are idempotent, yet not safe for
// all: while a rotated root reaches the replicas one by one, two replicas
// that disagree would each rewrite the objects back to their own root and
// wake each other on every write. With leader election off (one replica)
// they run all the time.
//
// Every replica:
//   - istio-ca-secret, created when neither CA Secret exists
//     (meshCA.run): a replica cannot serve without a root, so it must not
//     wait for an election; the API server lets one Create win and the
//     others load the winner's root.
//   - TokenReviews, which the API server does not store.
//
// Nobody in the control plane: revision tags' webhook configurations are
// written by `pilot tag` and only read here.
