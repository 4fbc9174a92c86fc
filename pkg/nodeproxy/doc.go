// Package nodeproxy is the node proxy of ambient mode: one per node, it
// learns the mesh's workloads over WDS (delta xDS on 15012, as a ztunnel
// does), holds a certificate for each ambient workload on its node (from
// the CA, by impersonation), terminates HBONE on :15008 with the
// destination workload's certificate, and tunnels what its local
// workloads send (captured to :15001 in their network namespaces) to the
// destination's node. It reaches the control plane only over xDS and the
// CA's API, never by importing its stages.
package nodeproxy
