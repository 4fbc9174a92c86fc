package ca

import (
	"bytes"
	"context"
	"crypto/elliptic"
	"encoding/pem"
	"slices"
	"testing"

	pb "istio.io/api/security/v1alpha1"
)

// TestPublishedRootIsReencoded: what the CA publishes as its root
// (RootPEM, for istio-ca-root-cert and the webhooks' caBundle, and the last
// element of every cert_chain) is the certificates of root-cert.pem
// encoded anew, never the operator's file as it is.
func TestPublishedRootIsReencoded(t *testing.T) {
	p := newPluggedCA(t)
	old := newPluggedCA(t)
	root, oldRoot := encodeCertificate(p.root), encodeCertificate(old.root)

	tests := []struct {
		name     string
		rootCert []byte
		want     []byte
	}{
		{"as encoded already", p.rootCert, root},
		{"comments around the root", slices.Concat(
			[]byte("# mesh root, rotate before 2030\nsubject=CN = plugged root\n"), p.rootCert, []byte("\n# end\n")), root},
		{"headers in the PEM block", pem.EncodeToMemory(&pem.Block{
			Type: "CERTIFICATE", Headers: map[string]string{"Comment": "mesh root"}, Bytes: p.root.Raw}), root},
		{"Windows line ends", bytes.ReplaceAll(p.rootCert, []byte("\n"), []byte("\r\n")), root},
		{"two roots during a rotation, in their order", slices.Concat(
			[]byte("# the old root\n"), old.rootCert, []byte("# the new root\n"), p.rootCert), slices.Concat(oldRoot, root)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewFromPEM(Options{}, p.caCert, p.caKey, p.certChain, tc.rootCert)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.RootPEM(); !bytes.Equal(got, tc.want) {
				t.Errorf("RootPEM is not root-cert.pem's certificates alone, encoded anew:\n%s", got)
			}

			srv, err := NewServer(ServerOptions{Authority: a, Authenticators: []Authenticator{proven{Identity: testID}}, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{
				Csr: string(csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()})),
			})
			if err != nil {
				t.Fatal(err)
			}
			if chain := resp.GetCertChain(); chain[len(chain)-1] != string(tc.want) {
				t.Errorf("the root answered with a certificate is not RootPEM:\n%s", chain[len(chain)-1])
			}
		})
	}
}
