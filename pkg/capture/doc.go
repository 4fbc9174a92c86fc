// Package capture installs and removes, inside a pod's network namespace,
// the rules that send the pod's TCP through the node proxy: outbound
// connections to :15001, inbound ones (except HBONE on :15008) to :15006,
// the node proxy's own marked sockets and loopback left alone. Two backends
// write the same rules: nftables over netlink (github.com/google/nftables,
// no binary needed; the default) and iptables, through the node's own
// iptables-restore, for nodes whose rules are all iptables rules.
package capture
