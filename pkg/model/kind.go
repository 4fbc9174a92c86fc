package model

// Kind is the type of an object in the store.
type Kind uint8

const (
	KindService Kind = iota + 1
	// KindEndpoints keys are named after the Service the endpoints belong to.
	KindEndpoints
	KindWorkload
	KindNamespace
	KindDestinationRule
	KindIngress
	KindIngressClass
	KindSecret
	KindPeerAuthentication
	// KindVirtualService configs hold *networking.VirtualService
	// (istio.io/api/networking/v1) specs.
	KindVirtualService
	// KindSourceProblems keys are named after the source whose problems
	// changed (model.SourceProblem); no proxy's config depends on them.
	KindSourceProblems
	// KindIngressStatus keys name an Ingress whose status alone changed
	// (Store.SetIngressStatus). Only the status writer reads the status,
	// so such a change pushes nothing.
	KindIngressStatus
)

var kindNames = map[Kind]string{
	KindService:            "Service",
	KindEndpoints:          "Endpoints",
	KindWorkload:           "Workload",
	KindNamespace:          "Namespace",
	KindDestinationRule:    "DestinationRule",
	KindIngress:            "Ingress",
	KindIngressClass:       "IngressClass",
	KindSecret:             "Secret",
	KindPeerAuthentication: "PeerAuthentication",
	KindVirtualService:     "VirtualService",
	KindSourceProblems:     "SourceProblems",
	KindIngressStatus:      "IngressStatus",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return "Unknown"
}

// MarshalText lets kinds key JSON maps on debug endpoints.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ConfigKey identifies one object of one kind.
type ConfigKey struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (k ConfigKey) String() string {
	return k.Kind.String() + "/" + k.Namespace + "/" + k.Name
}
