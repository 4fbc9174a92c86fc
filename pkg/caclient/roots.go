package caclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// RootFile trusts the root certificates in a file that may change while the
// process runs. The mounted ConfigMap istio-ca-root-cert is rewritten when
// the mesh's root is rotated; roots read once at start would lock the
// client out of a control plane that serves from the new root until it was
// restarted. The file is read again on each handshake (a few KB, once per
// connection), and a file that cannot be read or holds no certificate
// leaves the roots last read in place.
type RootFile struct {
	path string

	mu   sync.Mutex
	pem  []byte
	pool *x509.CertPool
}

// NewRootFile reads the roots in path; it fails if the file holds none.
func NewRootFile(path string) (*RootFile, error) {
	r := &RootFile{path: path}
	if _, err := r.Pool(); err != nil {
		return nil, err
	}
	return r, nil
}

// Pool returns the roots in the file now, or, when the file cannot be read
// or holds no certificate, those read last (an error only if there are
// none).
func (r *RootFile) Pool() (*x509.CertPool, error) {
	data, err := os.ReadFile(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.pool != nil && bytes.Equal(data, r.pem) {
		return r.pool, nil
	}
	if err == nil {
		pool := x509.NewCertPool()
		if pool.AppendCertsFromPEM(data) {
			r.pem, r.pool = data, pool
			return pool, nil
		}
		err = fmt.Errorf("%s holds no PEM certificate", r.path)
	}
	if r.pool != nil {
		return r.pool, nil
	}
	return nil, err
}

// ClientTLS is a client configuration that verifies a server named
// serverName against the file's roots of the moment.
func (r *RootFile) ClientTLS(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// crypto/tls would verify against a pool fixed when the
		// configuration was made; VerifyConnection, below, does the same
		// checks against the roots read for this handshake.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			roots, err := r.Pool()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			// serverName, not cs.ServerName: crypto/tls leaves the latter
			// empty for an IP address (never sent as SNI), and an empty
			// name would accept any certificate of the mesh root.
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: roots, Intermediates: inter, DNSName: serverName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			return err
		},
	}
}
