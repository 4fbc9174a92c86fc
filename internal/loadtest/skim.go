package loadtest

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages the clients skim (envoy/service/discovery/v3
// and envoy/config/...). Only these are read; everything else is skipped as
// bytes.
const (
	// DiscoveryResponse
	drVersion   = 1
	drResources = 2
	drTypeURL   = 4
	drNonce     = 5
	// DeltaDiscoveryResponse
	ddrSystemVersion = 1
	ddrResources     = 2
	ddrTypeURL       = 4
	ddrRemoved       = 6
	ddrNonce         = 5
	// Resource (delta)
	resName     = 3
	resResource = 2
	// google.protobuf.Any
	anyTypeURL = 1
	anyValue   = 2
	// Cluster
	clusterName       = 1
	clusterType       = 2
	clusterEDS        = 3
	clusterCircuit    = 10
	edsServiceName    = 2
	circuitThresholds = 1
	thresholdsMaxReqs = 4
	wrapperValue      = 1
	clusterTypeEDS    = 3
	// ClusterLoadAssignment
	claClusterName = 1
	claEndpoints   = 2
	localityLbEps  = 2
	lbEndpoint     = 1
	endpointAddr   = 1
	addrSocket     = 1
	socketAddress  = 2
	// Listener
	listenerName         = 1
	listenerFilterChains = 3
	listenerDefaultChain = 25
	listenerAPIListener  = 19
	apiListenerAny       = 1
	chainFilters         = 3
	filterTypedConfig    = 4
	hcmRDS               = 3
	rdsRouteConfigName   = 2
	// RouteConfiguration
	routeConfigName  = 1
	rcVirtualHosts   = 2
	vhRoutes         = 3
	routeRoute       = 2
	actionCluster    = 1
	actionWeighted   = 3
	weightedClusters = 1
	weightedName     = 1
)

const hcmTypeURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

var errMalformed = errors.New("malformed protobuf")

// each calls fn for every occurrence of field num in message b, with the
// field's bytes for length-delimited fields and its value for varints.
func each(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errMalformed
			}
			if err := fn(num, typ, v, 0); err != nil {
				return err
			}
			b = b[m:]
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errMalformed
			}
			if err := fn(num, typ, nil, v); err != nil {
				return err
			}
			b = b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return errMalformed
			}
			b = b[m:]
		}
	}
	return nil
}

// path calls fn with every length-delimited value reached by following the
// field numbers of nums from message b (repeated fields fan out).
func path(b []byte, fn func([]byte), nums ...protowire.Number) error {
	if len(nums) == 0 {
		fn(b)
		return nil
	}
	return each(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != nums[0] || typ != protowire.BytesType {
			return nil
		}
		return path(v, fn, nums[1:]...)
	})
}

// firstBytes is the first length-delimited field num of b; it aliases b.
// Callers compare it in place and copy only what they keep.
func firstBytes(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	err := each(b, func(n protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if out == nil && n == num && typ == protowire.BytesType {
			out = v[:len(v):len(v)]
		}
		return nil
	})
	return out, err
}

// wireResource is one resource of a response: its name and its serialized
// message (the Any's value). Both alias the response: map lookups with
// string(name) do not copy, and most resources of a response are only
// looked up.
type wireResource struct {
	name  []byte
	value []byte
}

// response is a skimmed DiscoveryResponse or DeltaDiscoveryResponse.
type response struct {
	typeURL, version, nonce string
	resources               []wireResource
	removed                 []string
}

// skimResponse reads the envelope of a response and the Anys inside it
// into r, reusing r's slices: a client skims thousands of resources per
// response, and growing a fresh slice for them each time was a tenth of
// its CPU. The resource bytes alias b; nothing is copied. Resource names
// are read from the resources themselves (field 1 of every type the
// clients use) in SotW, where nothing else names them.
func skimResponse(b []byte, delta bool, r *response) error {
	*r = response{resources: r.resources[:0], removed: r.removed[:0]}
	return each(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		if delta {
			switch num {
			case ddrSystemVersion:
				r.version = string(v)
			case ddrTypeURL:
				r.typeURL = string(v)
			case ddrNonce:
				r.nonce = string(v)
			case ddrRemoved:
				r.removed = append(r.removed, string(v))
			case ddrResources:
				var wr wireResource
				if err := each(v, func(n protowire.Number, t protowire.Type, rv []byte, _ uint64) error {
					switch {
					case n == resName && t == protowire.BytesType:
						wr.name = rv
					case n == resResource && t == protowire.BytesType:
						val, err := anyValueOf(rv)
						if err != nil {
							return err
						}
						wr.value = val
					}
					return nil
				}); err != nil {
					return err
				}
				r.resources = append(r.resources, wr)
			}
			return nil
		}
		switch num {
		case drVersion:
			r.version = string(v)
		case drTypeURL:
			r.typeURL = string(v)
		case drNonce:
			r.nonce = string(v)
		case drResources:
			val, err := anyValueOf(v)
			if err != nil {
				return err
			}
			name, err := resourceName(val)
			if err != nil {
				return err
			}
			r.resources = append(r.resources, wireResource{name: name, value: val})
		}
		return nil
	})
}

// resourceName is field 1 of a resource, its name in every type the
// clients use. Encoders write fields in number order, so it is almost
// always the first field and the rest is not read.
func resourceName(b []byte) ([]byte, error) {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, errMalformed
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, errMalformed
			}
			return v, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, errMalformed
		}
		b = b[m:]
	}
	return nil, nil
}

func anyValueOf(a []byte) ([]byte, error) {
	var val []byte
	err := each(a, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
		if n == anyValue && t == protowire.BytesType {
			val = v
		}
		return nil
	})
	return val, err
}

// clusterInfo is what a client needs of a cluster: whether it fetches
// endpoints over EDS, and under which name. Both alias the cluster's bytes.
type clusterInfo struct {
	name, edsName []byte
}

func skimCluster(b []byte) (clusterInfo, error) {
	var ci clusterInfo
	eds := false
	err := each(b, func(n protowire.Number, t protowire.Type, v []byte, x uint64) error {
		switch {
		case n == clusterName && t == protowire.BytesType:
			ci.name = v
		case n == clusterType && t == protowire.VarintType:
			eds = x == clusterTypeEDS
		case n == clusterEDS && t == protowire.BytesType:
			s, err := firstBytes(v, edsServiceName)
			if err != nil {
				return err
			}
			ci.edsName = s
		}
		return nil
	})
	if !eds {
		ci.edsName = nil
	} else if len(ci.edsName) == 0 {
		ci.edsName = ci.name
	}
	return ci, err
}

// clusterMaxRequests is circuit_breakers.thresholds[*].max_requests, or 0.
func clusterMaxRequests(b []byte) (uint32, error) {
	var out uint32
	err := path(b, func(w []byte) {
		_ = each(w, func(n protowire.Number, t protowire.Type, _ []byte, x uint64) error {
			if n == wrapperValue && t == protowire.VarintType {
				out = uint32(x)
			}
			return nil
		})
	}, clusterCircuit, circuitThresholds, thresholdsMaxReqs)
	return out, err
}

// claHasAddress reports whether a ClusterLoadAssignment holds an endpoint
// with address addr. It decodes nothing but the socket addresses.
func claHasAddress(b []byte, addr string) (bool, error) {
	found := false
	err := path(b, func(sa []byte) {
		if s, _ := firstBytes(sa, socketAddress); string(s) == addr {
			found = true
		}
	}, claEndpoints, localityLbEps, lbEndpoint, endpointAddr, addrSocket)
	return found, err
}

// listenerRoutes lists the route configurations a listener's HTTP
// connection managers fetch over RDS, in filter chains and in an API
// listener (proxyless gRPC).
func listenerRoutes(b []byte) ([]string, error) {
	var routes []string
	hcm := func(a []byte) {
		var url string
		var val []byte
		_ = each(a, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
			switch {
			case n == anyTypeURL && t == protowire.BytesType:
				url = string(v)
			case n == anyValue && t == protowire.BytesType:
				val = v
			}
			return nil
		})
		if url != hcmTypeURL {
			return
		}
		_ = path(val, func(rds []byte) {
			if name, _ := firstBytes(rds, rdsRouteConfigName); len(name) > 0 {
				routes = append(routes, string(name))
			}
		}, hcmRDS)
	}
	for _, p := range [][]protowire.Number{
		{listenerFilterChains, chainFilters, filterTypedConfig},
		{listenerDefaultChain, chainFilters, filterTypedConfig},
		{listenerAPIListener, apiListenerAny},
	} {
		if err := path(b, hcm, p...); err != nil {
			return nil, err
		}
	}
	return routes, nil
}

// routeClusters lists the clusters a route configuration's routes send to.
func routeClusters(b []byte) ([]string, error) {
	var out []string
	err := path(b, func(action []byte) {
		_ = each(action, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
			if t != protowire.BytesType {
				return nil
			}
			switch n {
			case actionCluster:
				out = append(out, string(v))
			case actionWeighted:
				_ = path(v, func(wc []byte) {
					if s, _ := firstBytes(wc, weightedName); len(s) > 0 {
						out = append(out, string(s))
					}
				}, weightedClusters)
			}
			return nil
		})
	}, rcVirtualHosts, vhRoutes, routeRoute)
	return out, err
}

// shortType is the last part of a type URL, for tables.
func shortType(url string) string {
	if i := strings.LastIndexByte(url, '.'); i >= 0 {
		return url[i+1:]
	}
	return url
}
