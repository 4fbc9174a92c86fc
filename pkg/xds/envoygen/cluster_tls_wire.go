package envoygen

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// A plain cluster under auto mTLS differs from its template in its name and
// in its transport socket matches, which carry its SNI and the identities
// of its workloads. Built as messages and marshalled, those matches were
// three fifths of a cold CDS generation (5,000 clusters after each new push
// context, on the path of the first proxy to ask). appendAutoMTLSMatches
// writes the same bytes directly: the parts no cluster changes are
// marshalled once, and the SNI, the identities and the lengths around them
// are written per cluster. TestAutoMTLSMatchesWire checks the bytes against
// proto.Marshal of autoMTLSMatches.

// fieldOf is the number of the field called name in m's message.
func fieldOf(m proto.Message, name protoreflect.Name) protowire.Number {
	return fieldNumber(m.ProtoReflect().Descriptor(), name)
}

var (
	fClusterMatches   = fieldOf(&cluster.Cluster{}, "transport_socket_matches")
	fMatchSocket      = fieldOf(&cluster.Cluster_TransportSocketMatch{}, "transport_socket")
	fSocketName       = fieldOf(&core.TransportSocket{}, "name")
	fSocketConfig     = fieldOf(&core.TransportSocket{}, "typed_config")
	fAnyTypeURL       = fieldOf(&anypb.Any{}, "type_url")
	fAnyValue         = fieldOf(&anypb.Any{}, "value")
	fUpstreamCommon   = fieldOf(&tlsv3.UpstreamTlsContext{}, "common_tls_context")
	fUpstreamSNI      = fieldOf(&tlsv3.UpstreamTlsContext{}, "sni")
	fCommonCombined   = fieldOf(&tlsv3.CommonTlsContext{}, "combined_validation_context")
	fCombinedDefault  = fieldOf(&tlsv3.CommonTlsContext_CombinedCertificateValidationContext{}, "default_validation_context")
	fValidationSANs   = fieldOf(&tlsv3.CertificateValidationContext{}, "match_typed_subject_alt_names")
	fSANType          = fieldOf(&tlsv3.SubjectAltNameMatcher{}, "san_type")
	fSANMatcher       = fieldOf(&tlsv3.SubjectAltNameMatcher{}, "matcher")
	fStringExact      = fieldOf(&matcher.StringMatcher{}, "exact")
	upstreamTLSURL    = typeURL(&tlsv3.UpstreamTlsContext{})
	autoMTLSConstants = newAutoMTLSParts()
)

// autoMTLSParts are the marshalled parts of the matches that every plain
// cluster shares. Each is a run of whole fields in field-number order, so
// that the bytes written around them are proto.Marshal's.
type autoMTLSParts struct {
	// commonHead is CommonTlsContext's fields before
	// combined_validation_context (TLS parameters, ALPN, certificate SDS),
	// by whether the cluster speaks HTTP/2.
	commonHead [2][]byte
	// rootSDS is CombinedCertificateValidationContext's fields after
	// default_validation_context (the mesh root's SDS).
	rootSDS []byte
	// matchHead is the mutual-TLS match's fields before its transport
	// socket (name and match).
	matchHead []byte
}

func newAutoMTLSParts() autoMTLSParts {
	var p autoMTLSParts
	for i, alpn := range [2][]string{istioALPN, istioH2ALPN} {
		p.commonHead[i] = marshalDeterministic(&tlsv3.CommonTlsContext{
			TlsParams: upstreamTLSParams, TlsCertificateSdsSecretConfigs: workloadCertSDS, AlpnProtocols: alpn,
		})
	}
	p.rootSDS = marshalDeterministic(&tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		ValidationContextSdsSecretConfig: workloadRootSDS,
	})
	p.matchHead = marshalDeterministic(&cluster.Cluster_TransportSocketMatch{Name: tlsModeIstioMatch, Match: tlsModeIstioFields})
	return p
}

// autoMTLSLayout is a cluster's auto mTLS match laid out for writing: its
// contents and the size of each of its messages, from the innermost out,
// which both the caller (to size the cluster) and appendAutoMTLSMatches
// (for the length prefixes) need.
type autoMTLSLayout struct {
	sans                                                       []string
	sni                                                        string
	head                                                       []byte
	sanList, combined, common, tlsContext, typedConfig, socket int
	match                                                      int
}

func layoutAutoMTLSMatches(sans []string, sni string, h2 bool) autoMTLSLayout {
	p := &autoMTLSConstants
	l := autoMTLSLayout{sans: sans, sni: sni, head: p.commonHead[0]}
	if h2 {
		l.head = p.commonHead[1]
	}
	for _, n := range sans {
		l.sanList += sizeBytesField(fValidationSANs, sanMatcherSize(n, sanType(n)))
	}
	l.combined = sizeBytesField(fCombinedDefault, l.sanList) + len(p.rootSDS)
	l.common = len(l.head) + sizeBytesField(fCommonCombined, l.combined)
	l.tlsContext = sizeBytesField(fUpstreamCommon, l.common) + sizeString(fUpstreamSNI, sni)
	l.typedConfig = sizeString(fAnyTypeURL, upstreamTLSURL) + sizeBytesField(fAnyValue, l.tlsContext)
	l.socket = sizeString(fSocketName, transportSocketTLS) + sizeBytesField(fSocketConfig, l.typedConfig)
	l.match = len(p.matchHead) + sizeBytesField(fMatchSocket, l.socket)
	return l
}

// size is how many bytes appendAutoMTLSMatches appends.
func (l *autoMTLSLayout) size() int { return sizeBytesField(fClusterMatches, l.match) }

// appendAutoMTLSMatches appends what proto.Marshal writes for a Cluster
// holding only autoMTLSMatches(istioMutualContext(sans, sni, h2)), where
// l is layoutAutoMTLSMatches(sans, sni, h2).
func appendAutoMTLSMatches(b []byte, l *autoMTLSLayout) []byte {
	p := &autoMTLSConstants
	b = appendFieldHeader(b, fClusterMatches, l.match)
	b = append(b, p.matchHead...)
	b = appendFieldHeader(b, fMatchSocket, l.socket)
	b = appendString(b, fSocketName, transportSocketTLS)
	b = appendFieldHeader(b, fSocketConfig, l.typedConfig)
	b = appendString(b, fAnyTypeURL, upstreamTLSURL)
	b = appendFieldHeader(b, fAnyValue, l.tlsContext)
	b = appendFieldHeader(b, fUpstreamCommon, l.common)
	b = append(b, l.head...)
	b = appendFieldHeader(b, fCommonCombined, l.combined)
	b = appendFieldHeader(b, fCombinedDefault, l.sanList)
	for _, n := range l.sans {
		t := sanType(n)
		b = appendFieldHeader(b, fValidationSANs, sanMatcherSize(n, t))
		if t != 0 {
			b = protowire.AppendTag(b, fSANType, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(t))
		}
		// exact is a member of a oneof: set, it is written even when
		// empty, as proto.Marshal writes it.
		b = appendFieldHeader(b, fSANMatcher, sizeBytesField(fStringExact, len(n)))
		b = appendFieldHeader(b, fStringExact, len(n))
		b = append(b, n...)
	}
	b = append(b, p.rootSDS...)
	return appendString(b, fUpstreamSNI, l.sni)
}

// sanMatcherSize is the marshalled size of SubjectAltNameMatcher n, of
// type t.
func sanMatcherSize(n string, t tlsv3.SubjectAltNameMatcher_SanType) int {
	size := sizeBytesField(fSANMatcher, sizeBytesField(fStringExact, len(n)))
	if t != 0 {
		size += protowire.SizeTag(fSANType) + protowire.SizeVarint(uint64(t))
	}
	return size
}

// sizeString is the size of string field num holding s; proto3 leaves an
// empty string out.
func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return sizeBytesField(num, len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
