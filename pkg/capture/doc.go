// Package capture installs and removes, inside a pod's network namespace,
// the nftables rules that send the pod's TCP through the node proxy:
// outbound connections to :15001, inbound ones (except HBONE on :15008) to
// :15006, the node proxy's own marked sockets and loopback left alone. It
// talks netlink (github.com/google/nftables), so no nft binary is needed.
package capture
