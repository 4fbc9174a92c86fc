package caclient

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/meshpilot/meshpilot/internal/testcerts"
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
