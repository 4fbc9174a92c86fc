package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/caclient"
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

	caConn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	defer caConn.Close()
	token := m.createToken(t, ns, sa, "istio-ca")
	cert, err := caclient.New(caclient.Options{
		Conn:  caConn,
		Token: func(context.Context) (string, error) { return token, nil },
		TTL:   time.Hour,
	}).Certificate(ctx, caclient.Request{Identity: "spiffe://cluster.local/ns/" + ns + "/sa/" + sa})
	if err != nil {
		t.Fatalf("certificate for %s/%s: %v", ns, sa, err)
	}
	clientTLS := serverTLS.Clone()
	clientTLS.Certificates = []tls.Certificate{cert.TLS}
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
