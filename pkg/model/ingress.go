package model

import "time"

// PathType is how an Ingress path matches, as in networking.k8s.io/v1.
type PathType string

const (
	PathTypeExact                  PathType = "Exact"
	PathTypePrefix                 PathType = "Prefix"
	PathTypeImplementationSpecific PathType = "ImplementationSpecific"
)

// Ingress is a networking.k8s.io/v1 Ingress as the mesh sees it. Whether
// meshpilot owns it (class, annotation, mode) is decided later, from the
// IngressClasses and the mesh settings; the model keeps what was written.
type Ingress struct {
	Name      string
	Namespace string
	// ClassName is spec.ingressClassName, "" when unset.
	ClassName string
	// ClassAnnotation is the legacy kubernetes.io/ingress.class annotation,
	// nil when absent: present but empty is not the same as absent (see
	// IngressOwnership.Owns).
	ClassAnnotation *string
	CreationTime    time.Time
	// Revision is the source's version of the object (resourceVersion or a
	// content hash), so that translations can be cached per revision. It is
	// the version last stored: a change that meshpilot does not read, or
	// one of the status alone, keeps the previous one.
	Revision       string
	Generation     int64
	DefaultBackend *IngressBackend
	Rules          []IngressRule
	TLS            []IngressTLS
	// LoadBalancer is the status the Ingress carries now, so the status
	// writer can tell when nothing needs writing. A change of it alone is
	// stored with Store.SetIngressStatus.
	LoadBalancer []LoadBalancerIngress
}

// Key identifies the Ingress in the store.
func (i *Ingress) Key() NamespacedName {
	return NamespacedName{Namespace: i.Namespace, Name: i.Name}
}

// IngressRule routes one host ("" for any host).
type IngressRule struct {
	Host  string
	Paths []IngressPath
}

// IngressPath is one HTTP path of a rule.
type IngressPath struct {
	Path     string
	PathType PathType
	Backend  IngressBackend
}

// IngressBackend names a Service port by number or by name. Resource
// backends are not supported; Resource names the kind when one was given,
// so the problem can be reported.
type IngressBackend struct {
	ServiceName string
	PortNumber  uint32
	PortName    string
	Resource    string
}

// IngressTLS terminates TLS for hosts with the certificate in a Secret of
// the Ingress's namespace.
type IngressTLS struct {
	Hosts      []string
	SecretName string
}

// LoadBalancerIngress is one address of a load balancer: an IP or a hostname.
type LoadBalancerIngress struct {
	IP       string
	Hostname string
}

// IngressClass is a networking.k8s.io/v1 IngressClass.
type IngressClass struct {
	Name       string
	Controller string
	// IsDefault is the ingressclass.kubernetes.io/is-default-class annotation.
	IsDefault bool
	// CreationTime decides among several default classes (see Owns).
	CreationTime time.Time
}

// Secret is a TLS certificate held in a Kubernetes Secret. Only the fields
// the mesh serves are kept.
type Secret struct {
	Name      string
	Namespace string
	Type      string
	// Cert and PrivateKey are PEM (tls.crt and tls.key); CACert is ca.crt
	// when present. Problems parsing them are found when they are served.
	Cert       []byte
	PrivateKey []byte
	CACert     []byte
}

// Key identifies the Secret in the store.
func (s *Secret) Key() NamespacedName {
	return NamespacedName{Namespace: s.Namespace, Name: s.Name}
}
