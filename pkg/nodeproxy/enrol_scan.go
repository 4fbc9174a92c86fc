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

// addressScan is the node's namespaces by address, with their processes,
// as scanNamespaces finds them, kept for a burst of enrolments. A reused
// scan can be older than a pod's sandbox: a lookup that it cannot answer
// scans again, and a capture that fails on what it said drops it.
type addressScan struct {
	scan func() nodeNamespaces
	now  func() time.Time

	found nodeNamespaces
	taken time.Time
}

func newAddressScan(p *Proxy) *addressScan {
	return &addressScan{scan: func() nodeNamespaces { return scanNamespaces(p) }, now: time.Now}
}

// namespaceOf is the one namespace that holds every address of ips.
func (s *addressScan) namespaceOf(ips []netip.Addr) (scannedNetns, error) {
	reused := s.found.byIP != nil && s.now().Sub(s.taken) < scanReuse
	if !reused {
		s.refresh()
	}
	path, err := namespaceHolding(s.found.byIP, ips)
	if err != nil && reused {
		s.refresh()
		path, err = namespaceHolding(s.found.byIP, ips)
	}
	if err != nil {
		return scannedNetns{}, err
	}
	return s.found.byPath[path], nil
}

func (s *addressScan) refresh() {
	s.found, s.taken = s.scan(), s.now()
}

// invalidate makes the next lookup scan again.
func (s *addressScan) invalidate() { s.found = nodeNamespaces{} }
