package helm

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
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// checkCAWorks uses every permission the CA needs under the chart's RBAC
// (the control plane runs as the chart's ServiceAccount): the root Secret
// (read or created at start), istio-ca-root-cert created in every
// namespace and updated when edited, TokenReview for a workload's token,
// and the Pod lookups of a node proxy's impersonation request.
func checkCAWorks(ctx context.Context, t *testing.T, env *kubetest.Env, cp *pilot) {
	t.Helper()
	configMaps := env.Kube.CoreV1().ConfigMaps("shop")
	var rootPEM string
	waitFor(t, time.Minute, "istio-ca-root-cert in shop", func() error {
		cm, err := configMaps.Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rootPEM = cm.Data["root-cert.pem"]; rootPEM == "" {
			return errors.New("empty root-cert.pem")
		}
		return nil
	})
	cm, err := configMaps.Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["root-cert.pem"] = "edited"
	if _, err := configMaps.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "istio-ca-root-cert repaired in shop", func() error {
		cm, err := configMaps.Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["root-cert.pem"] != rootPEM {
			return errors.New("not repaired yet")
		}
		return nil
	})

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(rootPEM)) {
		t.Fatal("root-cert.pem holds no certificate")
	}
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: roots, ServerName: "istiod." + releaseNamespace + ".svc", MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewIstioCertificateServiceClient(conn)
	issue := func(token string, impersonate string) (*x509.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			return nil, err
		}
		req := &pb.IstioCertificateRequest{
			Csr:              string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
			ValidityDuration: 3600,
		}
		if impersonate != "" {
			req.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"ImpersonatedIdentity": structpb.NewStringValue(impersonate)}}
		}
		rctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 10*time.Second)
		defer cancel()
		resp, err := client.CreateCertificate(rctx, req)
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
		if block == nil {
			return nil, errors.New("the leaf is not PEM")
		}
		return x509.ParseCertificate(block.Bytes)
	}
	expectIdentity := func(what string, leaf *x509.Certificate, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
			t.Errorf("%s: URI SANs %v, want %s", what, leaf.URIs, want)
		}
	}

	web := "spiffe://cluster.local/ns/shop/sa/web"
	leaf, err := issue(saToken(ctx, t, env, "shop", "web", ""), "")
	expectIdentity("a workload's own certificate", leaf, err, web)
	leaf, err = issue(saToken(ctx, t, env, releaseNamespace, "ztunnel", "ztunnel-node-1"), web)
	expectIdentity("a node proxy's certificate for a pod on its node", leaf, err, web)
}

// saToken is a token for audience istio-ca, bound to pod when one is named
// (a node proxy's node is that of its own Pod).
func saToken(ctx context.Context, t *testing.T, env *kubetest.Env, ns, sa, pod string) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}}}
	if pod != "" {
		p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	tok, err := env.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	return tok.Status.Token
}
