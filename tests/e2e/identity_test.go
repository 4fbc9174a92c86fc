package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// publishedRootTLS waits for the root the CA publishes in ns (ConfigMap
// istio-ca-root-cert, as a pod mounts it) and returns it with the client TLS
// config that trusts it. The client dials an address but checks the Service
// name, as the Istio agent does with its discovery address.
func publishedRootTLS(t *testing.T, m *kubeMesh, ns string) ([]byte, *tls.Config) {
	t.Helper()
	var rootPEM []byte
	waitFor(t, 30*time.Second, "istio-ca-root-cert in "+ns, func() error {
		cm, err := m.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rootPEM = []byte(cm.Data["root-cert.pem"]); len(rootPEM) == 0 {
			return errors.New("no root-cert.pem")
		}
		return nil
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("root-cert.pem holds no certificate:\n%s", rootPEM)
	}
	return rootPEM, &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
}

// identityConn is how a proxy running as ServiceAccount ns/sa reaches the
// control plane on 15012, as Istio's agent does: it trusts the root
// published in its namespace, gets a certificate for its identity from the
// CA with its token, and dials with that certificate.
func identityConn(t *testing.T, m *kubeMesh, cp *controlPlane, ns, sa string) *grpc.ClientConn {
	t.Helper()
	m.apply(t, "serviceaccount-"+ns+"-"+sa, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: "+sa+", namespace: "+ns+"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, serverTLS := publishedRootTLS(t, m, ns)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caConn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	defer caConn.Close()
	token := m.createToken(t, ns, sa, "istio-ca")
	resp, err := pb.NewIstioCertificateServiceClient(caConn).CreateCertificate(
		metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token),
		&pb.IstioCertificateRequest{Csr: string(newCSR(t, key, "spiffe://cluster.local/ns/"+ns+"/sa/"+sa)), ValidityDuration: 3600})
	if err != nil {
		t.Fatalf("certificate for %s/%s: %v", ns, sa, err)
	}
	var chain [][]byte
	for _, c := range resp.GetCertChain()[:len(resp.GetCertChain())-1] { // leaf and intermediates; the root is last
		block, _ := pem.Decode([]byte(c))
		if block == nil {
			t.Fatalf("not PEM: %q", c)
		}
		chain = append(chain, block.Bytes)
	}
	clientTLS := serverTLS.Clone()
	clientTLS.Certificates = []tls.Certificate{{Certificate: chain, PrivateKey: key}}
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
