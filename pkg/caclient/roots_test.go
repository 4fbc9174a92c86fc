package caclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/ca"
)

// TestRootFileFollowsRotation: a client built once trusts the roots the file
// holds at each handshake. After the mesh's root is rotated (the server
// serves from the new root and the mounted ConfigMap is rewritten) it
// connects again without a restart; a file that breaks keeps the roots last
// read.
func TestRootFileFollowsRotation(t *testing.T) {
	const name = "istiod.istio-system.svc"
	oldCert, oldRoot := testcerts.TLS(t, name)
	newCert, newRoot := testcerts.TLS(t, name)
	var serving atomic.Pointer[tls.Certificate]
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return serving.Load(), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()

	file := filepath.Join(t.TempDir(), "root-cert.pem")
	write := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(oldRoot)
	roots, err := NewRootFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := roots.ClientTLS(name)

	steps := []struct {
		name    string
		serves  *tls.Certificate
		file    []byte // nil: unchanged
		cfg     *tls.Config
		connect bool
	}{
		{"the first root", &oldCert, nil, cfg, true},
		{"the server rotated, the file not yet", &newCert, nil, cfg, false},
		{"the file rewritten", &newCert, newRoot, cfg, true},
		{"the old root no longer trusted", &oldCert, nil, cfg, false},
		{"a broken file keeps the roots last read", &newCert, []byte("not PEM"), cfg, true},
		{"another server name", &newCert, nil, roots.ClientTLS("other.istio-system.svc"), false},
	}
	for _, step := range steps {
		serving.Store(step.serves)
		if step.file != nil {
			write(step.file)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{}, "tcp", lis.Addr().String(), step.cfg)
		if err == nil {
			conn.Close()
		}
		if (err == nil) != step.connect {
			t.Errorf("%s: handshake error %v, want a connection: %v", step.name, err, step.connect)
		}
	}
}

func TestNewRootFileNeedsARoot(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{empty, filepath.Join(dir, "missing.pem")} {
		if _, err := NewRootFile(path); err == nil {
			t.Errorf("NewRootFile(%s) succeeded", filepath.Base(path))
		}
	}
}

// TestRootFileChecksAnIPServerName: when the control plane is dialled by
// address, the certificate must name that address. crypto/tls leaves
// ConnectionState.ServerName empty for an IP (an IP is never sent as SNI),
// so checking against it would accept any certificate of the mesh root,
// a workload's included, as the control plane.
func TestRootFileChecksAnIPServerName(t *testing.T) {
	authority, err := ca.NewSelfSigned(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "root-cert.pem")
	if err := os.WriteFile(file, authority.RootPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	roots, err := NewRootFile(file)
	if err != nil {
		t.Fatal(err)
	}
	serving := func(names ...string) *tls.Certificate {
		c, err := authority.ServingCertificate(names, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name       string
		serves     *tls.Certificate
		serverName string
		connect    bool
	}{
		{"the address it names", serving("127.0.0.1"), "127.0.0.1", true},
		{"another address", serving("127.0.0.2"), "127.0.0.1", false},
		{"only a DNS name", serving("istiod.istio-system.svc"), "127.0.0.1", false},
		{"a workload's certificate", workloadCert(t, authority), "127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*tc.serves}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lis.Close() })
			go func() {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
			conn, err := tls.Dial("tcp", lis.Addr().String(), roots.ClientTLS(tc.serverName))
			if err == nil {
				conn.Close()
			}
			if (err == nil) != tc.connect {
				t.Errorf("handshake error %v, want a connection: %v", err, tc.connect)
			}
		})
	}
}

// workloadCert is a certificate the mesh CA issues to a workload: a SPIFFE
// identity, and server auth among its usages.
func workloadCert(t *testing.T, authority *ca.Authority) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := url.Parse(webID)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id}}, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ca.ParseIdentity(webID)
	if err != nil {
		t.Fatal(err)
	}
	c, err := authority.Sign(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), parsed, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{c.Leaf.Raw}, PrivateKey: key, Leaf: c.Leaf}
}
