package hbone

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/testcerts"
)

// Without mesh roots the node trusts no client. Were ClientCAs left nil,
// crypto/tls would verify client certificates against the system pool, and
// a certificate from any public CA that named a SPIFFE ID would pass.
func TestServerWithoutRootsTrustsNoClient(t *testing.T) {
	const child = "HBONE_TEST_SYSTEM_ROOT"
	if os.Getenv(child) == "" {
		// A process loads the system pool once, and other tests may
		// have made this one load it: the test runs in a child process
		// whose system pool it chooses.
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
		cmd.Env = append(os.Environ(), child+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("in a child process: %v\n%s", err, out)
		}
		return
	}

	// A root that the system trusts and the mesh does not.
	public := testcerts.NewCA(t, "cluster.local")
	file := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: public.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", file)
	t.Setenv("SSL_CERT_DIR", t.TempDir())
	client := public.Issue(t, idA)
	if _, err := client.Leaf.Verify(x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the system pool does not trust the test's root: %v", err)
	}

	m := newMesh(t)
	cases := []struct {
		name  string
		roots *x509.CertPool
		refer string // what the server's log says
	}{
		{name: "no mesh roots", roots: nil, refer: "no mesh roots"},
		{name: "mesh roots", roots: m.roots(), refer: "unknown authority"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, nodeOpts{
				certs: map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b},
				roots: tc.roots,
			})
			refusesHandshake(t, n, &client, []string{"h2"}, tc.refer)
		})
	}
}
