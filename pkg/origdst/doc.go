// Package origdst recovers where a redirected TCP connection was going.
//
// When netfilter redirects a connection to a local proxy (REDIRECT or DNAT
// in nftables or iptables), the accepted socket's local address is the
// proxy's; conntrack still knows the original destination, and the
// SO_ORIGINAL_DST (IPv4) and IP6T_SO_ORIGINAL_DST (IPv6) socket options
// read it back. That lookup is this package's one job.
package origdst
