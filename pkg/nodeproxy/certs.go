package nodeproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/pkg/caclient"
)

// renewAt is how far into its lifetime a certificate is renewed, as
// Istio's agents do: early enough that a slow or failing CA leaves time.
const renewAt = 0.8

// certStore holds a certificate per workload identity on the node, got
// from the CA by impersonation, and the mesh root the CA last sent. It
// renews each before expiry.
type certStore struct {
	ca  *caclient.Client
	log *slog.Logger
	// now is time.Now, replaceable in tests.
	now func() time.Time

	mu      sync.Mutex
	certs   map[string]*caclient.Certificate
	wanted  map[string]bool
	roots   *x509.CertPool
	rootPEM []byte
	// onChange is told when the set of held certificates changes.
	onChange func(held int, earliestExpiry time.Time)
	// kick wakes the sync loop when want adds an identity.
	kick chan struct{}
	// changed is closed, and replaced, whenever a certificate is stored
	// or the wanted identities change, for await.
	changed chan struct{}
}

func newCertStore(ca *caclient.Client, log *slog.Logger) *certStore {
	return &certStore{ca: ca, log: log, now: time.Now, certs: map[string]*caclient.Certificate{}, wanted: map[string]bool{},
		kick: make(chan struct{}, 1), changed: make(chan struct{})}
}

// errNoCertificate: the identity has no certificate (yet).
var errNoCertificate = errors.New("no certificate for this identity")

// certWait bounds how long a connection waits for its workload's first
// certificate. After a node proxy starts, the node's certificates arrive
// one by one; a connection that comes before its own should wait for it,
// as ztunnel's do, rather than fail.
const certWait = 5 * time.Second

// await returns the certificate for identity, waiting, up to certWait or
// until ctx ends, while the identity is wanted and its certificate has not
// come yet. An identity no longer wanted fails at once.
func (s *certStore) await(ctx context.Context, identity string) (*tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, certWait)
	defer cancel()
	for {
		s.mu.Lock()
		c, wanted, changed := s.certs[identity], s.wanted[identity], s.changed
		s.mu.Unlock()
		switch {
		case c != nil:
			return &c.TLS, nil
		case !wanted:
			return nil, fmt.Errorf("%s: %w", identity, errNoCertificate)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w: still waiting for the CA (%v)", identity, errNoCertificate, context.Cause(ctx))
		}
	}
}

// rootPool is the mesh root the CA sent last; nil before the first
// certificate.
func (s *certStore) rootPool() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roots
}

// want sets the identities to hold: new ones are fetched at the next sync,
// others forgotten at once, so that a workload that left is not served.
func (s *certStore) want(identities []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]bool, len(identities))
	added := false
	for _, id := range identities {
		next[id] = true
		added = added || !s.wanted[id]
	}
	if added {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	for id := range s.certs {
		if !next[id] {
			delete(s.certs, id)
		}
	}
	s.wanted = next
	s.changedLocked()
}

// sync fetches every wanted identity without a certificate and renews
// those past renewAt of their lifetime. It returns when the next renewal
// is due. Failures are logged and retried at the next sync; a certificate
// still valid stays in use.
func (s *certStore) sync(ctx context.Context) time.Time {
	s.mu.Lock()
	var due []string
	next := s.now().Add(time.Hour)
	for id := range s.wanted {
		c := s.certs[id]
		if c == nil {
			due = append(due, id)
			continue
		}
		renew := c.Leaf.NotBefore.Add(time.Duration(renewAt * float64(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore))))
		if !s.now().Before(renew) {
			due = append(due, id)
		} else if renew.Before(next) {
			next = renew
		}
	}
	s.mu.Unlock()

	for _, id := range due {
		c, err := s.ca.Certificate(ctx, caclient.Request{Identity: id, Impersonate: true})
		if err != nil {
			s.log.Error("workload certificate not obtained; retrying", "identity", id, "err", err)
			next = s.now().Add(2 * time.Second)
			continue
		}
		s.store(id, c)
		if renew := c.Leaf.NotBefore.Add(time.Duration(renewAt * float64(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)))); renew.Before(next) {
			next = renew
		}
	}
	return next
}

func (s *certStore) store(id string, c *caclient.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wanted[id] {
		return // the workload left while its certificate was on the way
	}
	s.certs[id] = c
	if string(c.RootPEM) != string(s.rootPEM) {
		pool := x509.NewCertPool()
		if pool.AppendCertsFromPEM(c.RootPEM) {
			s.roots, s.rootPEM = pool, c.RootPEM
		}
	}
	s.log.Info("workload certificate obtained", "identity", id, "expires", c.NotAfter())
	s.changedLocked()
}

func (s *certStore) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	if s.onChange == nil {
		return
	}
	var earliest time.Time
	for _, c := range s.certs {
		if earliest.IsZero() || c.NotAfter().Before(earliest) {
			earliest = c.NotAfter()
		}
	}
	s.onChange(len(s.certs), earliest)
}

// held lists the identities held with their expiry, for the debug page.
func (s *certStore) held() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.certs))
	for id, c := range s.certs {
		out[id] = c.NotAfter()
	}
	return out
}
