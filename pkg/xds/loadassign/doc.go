// Package loadassign builds the ClusterLoadAssignments (EDS resources) that
// every generator serves: it lays a cluster's endpoints out by locality,
// encodes the layout straight to protobuf wire format (a measured hot path;
// the tests prove byte equality with proto.Marshal), and caches the encoded
// assignments so that each is marshalled once for every proxy and every kind
// of client. Generators that shape assignments per proxy (Envoy's locality
// priorities) rearrange a Layout and encode it here too.
package loadassign
