package capture

import "fmt"

// Ports say where captured connections go and what is exempt.
type Ports struct {
	// Outbound receives the pod's outbound TCP (ztunnel's 15001).
	Outbound uint16
	// Inbound receives TCP arriving at the pod in plaintext (15006).
	Inbound uint16
	// HBONE arrives unredirected: the node proxy listens on it in the
	// pod's namespace (15008).
	HBONE uint16
	// Mark is the node proxy's socket mark; its connections pass.
	Mark uint32
}

// Backend installs, removes and finds the capture in a network namespace.
// Every method takes the namespace's path and is safe to repeat: CNI ADD
// and DEL may come twice, and a restarted agent checks what is there.
type Backend interface {
	// Name is the backend's name in flags (--capture-backend).
	Name() string
	// Install puts the capture into the namespace, replacing an earlier
	// one of the same backend.
	Install(path string, p Ports) error
	// Remove deletes the capture; removing what is not there is not an
	// error.
	Remove(path string) error
	// Installed reports whether the namespace holds the whole capture.
	Installed(path string) (bool, error)
}

// Backends are the capture's implementations by name. nftables is the
// default: it talks netlink and needs no binary. iptables is for nodes
// whose other rules are iptables rules, so that one tool shows them all.
var Backends = map[string]Backend{
	NFTables.Name(): NFTables,
	IPTables.Name(): IPTables,
}

// DefaultBackend is the backend used unless a flag chooses another.
const DefaultBackend = "nftables"

// BackendByName returns the named backend, or an error naming the choices.
func BackendByName(name string) (Backend, error) {
	if b, ok := Backends[name]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("capture: unknown backend %q: want nftables or iptables", name)
}
