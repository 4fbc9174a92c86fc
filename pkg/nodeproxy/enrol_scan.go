package nodeproxy

import (
	"net/netip"
	"time"
)

// scanReuse is how long one scan of the node's network namespaces answers
// further enrolments. Labelling a namespace ambient queues all its running
// pods at once, and a scan enters every namespace on the node: one scan
// per pod made a node of a hundred pods enter namespaces ten thousand
// times for one label.
const scanReuse = 2 * time.Second

// addressScan is the node's namespaces by address, as scanNamespaces
// finds them, kept for a burst of enrolments. A reused scan can be older
// than a pod's sandbox: a lookup that it cannot answer scans again, and a
// capture that fails on what it said drops it.
type addressScan struct {
	scan func() map[netip.Addr][]string
	now  func() time.Time

	byIP  map[netip.Addr][]string
	taken time.Time
}

func newAddressScan(p *Proxy) *addressScan {
	return &addressScan{scan: func() map[netip.Addr][]string { return scanNamespaces(p) }, now: time.Now}
}

// namespaceOf is the one namespace that holds every address of ips.
func (s *addressScan) namespaceOf(ips []netip.Addr) (string, error) {
	reused := s.byIP != nil && s.now().Sub(s.taken) < scanReuse
	if !reused {
		s.refresh()
	}
	path, err := namespaceHolding(s.byIP, ips)
	if err != nil && reused {
		s.refresh()
		path, err = namespaceHolding(s.byIP, ips)
	}
	return path, err
}

func (s *addressScan) refresh() {
	s.byIP, s.taken = s.scan(), s.now()
}

// invalidate makes the next lookup scan again.
func (s *addressScan) invalidate() { s.byIP = nil }
