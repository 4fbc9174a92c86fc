package xdstest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// decodeResponse unpacks and checks every resource of a response. Any problem
// rejects the whole response: the client then NACKs it, as Envoy does when
// a response cannot be applied ("ACK/NACK and resource type instance
// version", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
// Envoy's CDS and LDS still apply the valid clusters or listeners of a
// rejected response (cds_api_helper.cc); this client keeps all of its
// previous state instead, which can only make a test stricter.
//
// Repeated names: Envoy's CDS and LDS reject a duplicate cluster or listener
// (cds_api_helper.cc, lds_api.cc), and delta rejects a name repeated among
// resources, or among removed_resources, or present in both
// ("duplicate name ... found in the union of added+removed resources",
// DeltaSubscriptionState::handleGoodResponse, delta_subscription_state.cc).
// A SotW response repeating the name of an EDS, RDS or SDS resource is
// accepted by Envoy, which hands the first one to its watch
// (GrpcMuxImpl::processDiscoveryResources, grpc_mux_impl.cc); this client
// rejects it, which again can only make a test stricter.
func decodeResponse(resp *response) (map[string]proto.Message, error) {
	out := make(map[string]proto.Message, len(resp.resources))
	var errs []error
	removed := map[string]bool{}
	for _, name := range resp.removed {
		if removed[name] {
			errs = append(errs, fmt.Errorf("duplicate name %s found in the union of added+removed resources", name))
		}
		removed[name] = true
	}
	for _, r := range resp.resources {
		m, name, err := resp.unpack(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.name != "" && r.name != name {
			errs = append(errs, fmt.Errorf("resource %q holds %q", r.name, name))
		}
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Errorf("duplicate resource %q", name))
		}
		if removed[name] {
			errs = append(errs, fmt.Errorf("duplicate name %s found in the union of added+removed resources", name))
		}
		if err := ValidateDeep(m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		out[name] = m
	}
	return out, errors.Join(errs...)
}

// unpack unpacks one resource of resp, which must be of resp's type, and
// names it.
func (resp *response) unpack(r wireResource) (proto.Message, string, error) {
	if r.any.GetTypeUrl() != resp.typeURL {
		return nil, "", fmt.Errorf("resource of type %s in a %s response", r.any.GetTypeUrl(), resp.typeURL)
	}
	m, err := r.any.UnmarshalNew()
	if err != nil {
		return nil, "", fmt.Errorf("unpack %s: %w", r.any.GetTypeUrl(), err)
	}
	return m, resourceName(m), nil
}

func resourceName(m proto.Message) string {
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.GetName()
	case *listenerv3.Listener:
		return r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case *routev3.RouteConfiguration:
		return r.GetName()
	case *tlsv3.Secret:
		return r.GetName()
	}
	return ""
}

// dependency is a resource another one waits for while warming.
type dependency struct {
	typeURL, name string
	// timeout is the config source's initial_fetch_timeout; 0 waits forever.
	timeout time.Duration
}

// defaultFetchTimeout applies when a ConfigSource leaves
// initial_fetch_timeout unset: "If not set, defaults to 15s. A timeout of
// 0s disables it." (ConfigSource.initial_fetch_timeout,
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/core/v3/config_source.proto).
const defaultFetchTimeout = 15 * time.Second

func fetchTimeout(cs *corev3.ConfigSource) time.Duration {
	if cs.GetInitialFetchTimeout() == nil {
		return defaultFetchTimeout
	}
	return cs.GetInitialFetchTimeout().AsDuration()
}

// edsDependency is the load assignment an EDS cluster fetches over ADS:
// named by eds_cluster_config.service_name, else by the cluster's name. A
// cluster of another type waits for nothing from the server: a STRICT_DNS
// or LOGICAL_DNS cluster warms with its first resolution, whatever it
// finds, which this client takes as done at once.
func edsDependency(c *clusterv3.Cluster) (dependency, bool) {
	eds := c.GetEdsClusterConfig()
	if c.GetType() != clusterv3.Cluster_EDS || eds.GetEdsConfig().GetAds() == nil {
		return dependency{}, false
	}
	name := eds.GetServiceName()
	if name == "" {
		name = c.GetName()
	}
	return dependency{resourcev3.EndpointType, name, fetchTimeout(eds.GetEdsConfig())}, true
}

// referencesOf walks m, including what is packed in Any fields, and returns
// the route configurations (HCM rds) and secrets (SdsSecretConfig) it
// fetches over ADS, and the clusters its routes and tcp_proxy filters name.
func referencesOf(m proto.Message) (deps []dependency, clusters []string) {
	add := func(d dependency) {
		if !slices.ContainsFunc(deps, func(e dependency) bool { return e.typeURL == d.typeURL && e.name == d.name }) {
			deps = append(deps, d)
		}
	}
	walkMessages(m.ProtoReflect(), func(m proto.Message) {
		switch r := m.(type) {
		case *hcmv3.Rds:
			if r.GetConfigSource().GetAds() != nil {
				add(dependency{resourcev3.RouteType, r.GetRouteConfigName(), fetchTimeout(r.GetConfigSource())})
			}
		case *tlsv3.SdsSecretConfig:
			if r.GetSdsConfig().GetAds() != nil {
				add(dependency{resourcev3.SecretType, r.GetName(), fetchTimeout(r.GetSdsConfig())})
			}
		case *routev3.RouteAction:
			clusters = appendCluster(clusters, r.GetCluster(), r.GetWeightedClusters())
		case *tcpproxyv3.TcpProxy:
			for _, w := range r.GetWeightedClusters().GetClusters() {
				clusters = appendCluster(clusters, w.GetName(), nil)
			}
			clusters = appendCluster(clusters, r.GetCluster(), nil)
		}
	})
	return deps, clusters
}

func appendCluster(clusters []string, name string, weighted *routev3.WeightedCluster) []string {
	for _, w := range weighted.GetClusters() {
		clusters = appendCluster(clusters, w.GetName(), nil)
	}
	if name != "" && !slices.Contains(clusters, name) {
		clusters = append(clusters, name)
	}
	return clusters
}

// walkMessages calls fn on m and every message inside it, unpacking Any fields
// whose types are linked in (ValidateDeep reports those that are not).
func walkMessages(m protoreflect.Message, fn func(proto.Message)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		if inner, err := a.UnmarshalNew(); err == nil {
			walkMessages(inner.ProtoReflect(), fn)
		}
		return
	}
	fn(m.Interface())
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				walkMessages(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walkMessages(mv.Message(), fn)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkMessages(v.Message(), fn)
		}
		return true
	})
}
