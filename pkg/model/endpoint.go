package model

// HealthStatus is an endpoint's readiness as reported by its EndpointSlice.
type HealthStatus uint8

const (
	Healthy HealthStatus = iota
	Unhealthy
	// Draining endpoints are terminating but still serving.
	Draining
)

func (h HealthStatus) String() string {
	switch h {
	case Healthy:
		return "HEALTHY"
	case Draining:
		return "DRAINING"
	default:
		return "UNHEALTHY"
	}
}

// Locality is where a workload runs.
type Locality struct {
	Region  string
	Zone    string
	SubZone string
}

// String renders the locality as region/zone/subzone, Istio's format.
func (l Locality) String() string {
	if l == (Locality{}) {
		return ""
	}
	return l.Region + "/" + l.Zone + "/" + l.SubZone
}

// Endpoint is one address and port that serves one port of a service.
// Endpoints are immutable once stored: readers share them without copying.
type Endpoint struct {
	Address string
	// Port is the port the workload listens on.
	Port   uint32
	Health HealthStatus
	// MTLS says that Labels mark the workload for mutual TLS
	// (LabelledForMTLS), for auto mTLS to send it mutual TLS. Whoever sets
	// Labels sets it: EDS asks it of every endpoint it marshals, and a
	// lookup in the workload's label map is a cache miss per endpoint. (It
	// takes no room: it fills the padding after Health.)
	MTLS bool
	// FromPod says the EndpointSlice names a Pod as the endpoint's target.
	// Node proxies learn such a workload from the Pod itself; an endpoint
	// without one (a selector-less Service's, written by hand or by
	// another controller) is a workload of its own for them.
	FromPod bool
	// ServicePortName names the service port that this endpoint serves; it is
	// the EndpointSlice port name, which Kubernetes sets to the Service's.
	ServicePortName string
	// Labels are the labels of the workload behind the endpoint, used to
	// select DestinationRule subsets. They are shared, never mutated.
	Labels         map[string]string
	Locality       Locality
	ServiceAccount string
	Namespace      string
}
