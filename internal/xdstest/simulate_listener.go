package xdstest

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// matchFilterChain picks the listener's filter chain for req by Envoy's
// rule (listener_components.proto, FilterChainMatch,
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/listener/v3/listener_components.proto#config-listener-v3-filterchainmatch):
// the criteria are applied in order (destination port, destination IP,
// server name, transport protocol, application protocols, ...), and at
// each one only the chains
// with the most specific value that matches stay; a chain that leaves a
// criterion unset is the least specific. There is no backtracking: when
// the chains left at some stage all fail a later one, nothing matches and
// the default filter chain, if any, takes the connection. why is set, and
// chain nil, when a chain uses a criterion the simulation does not model.
func matchFilterChain(l *listener.Listener, req Request) (chain *listener.FilterChain, name, why string) {
	chains := l.GetFilterChains()
	candidates := make([]int, 0, len(chains))
	for i, fc := range chains {
		m := fc.GetFilterChainMatch()
		if len(m.GetDirectSourcePrefixRanges()) > 0 ||
			m.GetSourceType() != listener.FilterChainMatch_ANY || len(m.GetSourcePrefixRanges()) > 0 ||
			len(m.GetSourcePorts()) > 0 || m.GetAddressSuffix() != "" || m.GetSuffixLen() != nil {
			return nil, "", fmt.Sprintf("listener %s: filter chain %d matches on criteria the simulation does not model", l.GetName(), i)
		}
		candidates = append(candidates, i)
	}
	transport := "raw_buffer"
	if req.SNI != "" || req.TLS {
		transport = "tls" // what the TLS inspector reports
	}
	dst, _ := netip.ParseAddr(req.DestinationIP)
	stages := []func(*listener.FilterChainMatch) int{
		func(m *listener.FilterChainMatch) int {
			switch {
			case m.GetDestinationPort() == nil:
				return 0
			case m.GetDestinationPort().GetValue() == req.Port:
				return 1
			}
			return -1
		},
		func(m *listener.FilterChainMatch) int { return prefixSpecificity(m, dst) },
		func(m *listener.FilterChainMatch) int { return serverNameSpecificity(m.GetServerNames(), req.SNI) },
		func(m *listener.FilterChainMatch) int {
			switch m.GetTransportProtocol() {
			case "":
				return 0
			case transport:
				return 1
			}
			return -1
		},
		// The TLS inspector reports the client's ALPN offer; a chain
		// matches when it lists any of the offered protocols.
		func(m *listener.FilterChainMatch) int {
			protocols := m.GetApplicationProtocols()
			if len(protocols) == 0 {
				return 0
			}
			for _, p := range req.ALPN {
				if slices.Contains(protocols, p) {
					return 1
				}
			}
			return -1
		},
	}
	for _, specificity := range stages {
		candidates = mostSpecific(chains, candidates, specificity)
	}
	switch len(candidates) {
	case 0:
		if d := l.GetDefaultFilterChain(); d != nil {
			return d, chainName(d, "default"), ""
		}
		return nil, "", ""
	case 1:
		return chains[candidates[0]], chainName(chains[candidates[0]], "#"+strconv.Itoa(candidates[0])), ""
	}
	// Envoy refuses a listener whose chains have the same match.
	return nil, "", fmt.Sprintf("listener %s: filter chains %v match alike, which Envoy rejects", l.GetName(), candidates)
}

func chainName(fc *listener.FilterChain, fallback string) string {
	if fc.GetName() != "" {
		return fc.GetName()
	}
	return fallback
}

// mostSpecific keeps the candidates whose specificity (negative: no
// match) is the highest that matches.
func mostSpecific(chains []*listener.FilterChain, candidates []int, specificity func(*listener.FilterChainMatch) int) []int {
	best := -1
	var kept []int
	for _, i := range candidates {
		s := specificity(chains[i].GetFilterChainMatch())
		switch {
		case s < 0 || s < best:
		case s > best:
			best, kept = s, []int{i}
		default:
			kept = append(kept, i)
		}
	}
	return kept
}

// prefixSpecificity is 0 for a chain without prefix_ranges, else one more
// than the longest of its ranges that holds dst, -1 when none does.
func prefixSpecificity(m *listener.FilterChainMatch, dst netip.Addr) int {
	ranges := m.GetPrefixRanges()
	if len(ranges) == 0 {
		return 0
	}
	best := -1
	for _, r := range ranges {
		p, err := netip.ParseAddr(r.GetAddressPrefix())
		if err != nil {
			continue
		}
		bits := int(r.GetPrefixLen().GetValue())
		prefix, err := p.Prefix(bits)
		if err == nil && dst.IsValid() && prefix.Contains(dst) && bits+1 > best {
			best = bits + 1
		}
	}
	return best
}

// serverNameSpecificity ranks a chain's server_names against the SNI:
// an exact name beats the longest wildcard suffix ("*.example.com" covers
// "www.example.com" but not "example.com"), which beats no server_names.
func serverNameSpecificity(names []string, sni string) int {
	if len(names) == 0 {
		return 0
	}
	sni = strings.ToLower(sni)
	best := -1
	for _, n := range names {
		n = strings.ToLower(n)
		switch {
		case sni == "":
		case n == sni:
			return 1 << 16
		case strings.HasPrefix(n, "*.") && strings.HasSuffix(sni, n[1:]) && len(sni) > len(n)-1:
			best = max(best, len(n))
		}
	}
	return best
}

// terminateTLS applies a chain's transport socket: a DownstreamTlsContext
// (envoy.transport_sockets.tls) terminates TLS, and with
// require_client_certificate set a client without a certificate fails the
// handshake (tls.proto, DownstreamTlsContext). ok is false for a socket
// the simulation does not model.
func terminateTLS(res *Result, ts *core.TransportSocket, req Request) (refused bool, detail string, ok bool) {
	var ctx tlsv3.DownstreamTlsContext
	if ts.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/"+string(proto.MessageName(&ctx)) {
		return false, fmt.Sprintf("transport socket %s", ts.GetTypedConfig().GetTypeUrl()), false
	}
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		return false, err.Error(), false
	}
	if req.SNI == "" && !req.TLS {
		return true, "the chain expects TLS and the client sent plaintext", true
	}
	res.ClientCertRequired = ctx.GetRequireClientCertificate().GetValue()
	if res.ClientCertRequired && !req.ClientCertificate {
		return true, "the chain requires a client certificate and the client presented none", true
	}
	res.TLSTerminated = true
	return false, "", true
}
