package helm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
)

const serviceAccount = "istiod"

// TestRBACIsSufficientAndNecessary installs both charts, then runs the
// control plane with nothing but the chart's ServiceAccount token: it must
// sync every source, serve xDS, write Ingress status and issue certificates
// without a single "forbidden". Then one rule goes, and the control plane must say so plainly
// and stay unready rather than serve a partial view.
func TestRBACIsSufficientAndNecessary(t *testing.T) {
	tl := newTools(t)
	env := kubetest.Start(t)
	admin := writeKubeconfig(t, env.Config, "")
	tl.run(t, "", tl.helm, "--kubeconfig", admin, "install", "istio-base", tl.chart("base"),
		"--namespace", releaseNamespace, "--create-namespace")
	tl.run(t, "", tl.helm, "--kubeconfig", admin, "install", "istiod", tl.chart("pilot"),
		"--namespace", releaseNamespace)
	tl.run(t, rbacWorldYAML, tl.kubectl, "--kubeconfig", admin, "apply", "-f", "-")
	tl.run(t, "", tl.kubectl, "--kubeconfig", admin, "patch", "service", "istio-ingressgateway", "-n", releaseNamespace,
		"--subresource=status", "--type=merge", "-p", `{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.7"}]}}}`)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	expiry := int64(3600)
	tok, err := env.Kube.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", serviceAccount, err)
	}
	asPilot := writeKubeconfig(t, env.Config, tok.Status.Token)
	injectDir := mountedInjectorConfig(ctx, t, env)

	t.Run("the chart's rules are enough", func(t *testing.T) {
		cp := startPilot(t, asPilot, injectDir, "rbac-full")
		waitFor(t, time.Minute, "ready", func() error {
			if code, body := cp.get("/ready"); code != http.StatusOK {
				return fmt.Errorf("/ready: %d %s", code, body)
			}
			return nil
		})
		waitFor(t, time.Minute, "the web cluster over xDS", func() error {
			names, err := clusterNames(ctx, cp.xdsAddr)
			if err != nil {
				return err
			}
			if !names["outbound|8080||web.shop.svc.cluster.local"] {
				return fmt.Errorf("clusters: %v", names)
			}
			return nil
		})
		waitFor(t, time.Minute, "Ingress status", func() error {
			out, err := tl.try("", tl.kubectl, "--kubeconfig", admin, "get", "ingress", "web", "-n", "shop",
				"-o", "jsonpath={.status.loadBalancer.ingress[*].ip}")
			if err != nil || out != "198.51.100.7" {
				return fmt.Errorf("status ips %q (%v)", out, err)
			}
			return nil
		})
		waitFor(t, time.Minute, "caBundle in the chart's webhook configurations", func() error {
			return caBundlesPatched(ctx, env)
		})
		// The CA: its Secret, TokenReview, the Pod check of impersonation,
		// and istio-ca-root-cert published and repaired in every namespace.
		checkCAWorks(ctx, t, env, cp)
		cp.stop()
		if log := cp.logs.String(); strings.Contains(strings.ToLower(log), "forbidden") {
			t.Errorf("the control plane was refused something:\n%s", log)
		}
	})

	// The CRD is installed here, so the watch for it never starts; ask the
	// authorizer directly instead.
	t.Run("watching for the Istio CRDs it reads, and no other", func(t *testing.T) {
		for _, tc := range []struct {
			verb, name string
			allowed    bool
		}{
			{"list", "destinationrules.networking.istio.io", true},
			{"watch", "destinationrules.networking.istio.io", true},
			{"list", "peerauthentications.security.istio.io", true},
			{"watch", "peerauthentications.security.istio.io", true},
			{"list", "virtualservices.networking.istio.io", true},
			{"watch", "virtualservices.networking.istio.io", true},
			{"list", "gateways.networking.istio.io", false},
			{"list", "authorizationpolicies.security.istio.io", false},
			{"get", "destinationrules.networking.istio.io", false},
			{"get", "peerauthentications.security.istio.io", false},
			{"get", "virtualservices.networking.istio.io", false},
		} {
			review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User: "system:serviceaccount:" + releaseNamespace + ":" + serviceAccount,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: tc.verb, Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: tc.name,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != tc.allowed {
				t.Errorf("%s customresourcedefinitions/%s: allowed = %v, want %v", tc.verb, tc.name, review.Status.Allowed, tc.allowed)
			}
		}
	})

	// The Istio kinds it reads, in any namespace, and not the ones it does
	// not read.
	t.Run("reading the Istio kinds it serves, and no other", func(t *testing.T) {
		for _, tc := range []struct {
			verb, group, resource string
			allowed               bool
		}{
			{"list", "networking.istio.io", "virtualservices", true},
			{"watch", "networking.istio.io", "virtualservices", true},
			{"list", "networking.istio.io", "destinationrules", true},
			{"list", "security.istio.io", "peerauthentications", true},
			{"list", "networking.istio.io", "gateways", false},
			{"list", "networking.istio.io", "serviceentries", false},
			{"create", "networking.istio.io", "virtualservices", false},
			{"update", "networking.istio.io", "virtualservices", false},
		} {
			review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User: "system:serviceaccount:" + releaseNamespace + ":" + serviceAccount,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: tc.verb, Group: tc.group, Resource: tc.resource, Namespace: "shop",
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != tc.allowed {
				t.Errorf("%s %s.%s: allowed = %v, want %v", tc.verb, tc.resource, tc.group, review.Status.Allowed, tc.allowed)
			}
		}
	})

	// What the control plane asks of the API server besides its informers'
	// list and watch, each checked against the chart's rules; and writes it
	// never makes, which the rules must not grant.
	t.Run("the calls it makes besides its informers, and no more", func(t *testing.T) {
		for _, tc := range []struct {
			why                         string
			verb, group, resource, name string
			namespace                   string
			allowed                     bool
		}{
			{"the injector reads the labels of a namespace its cache does not know yet",
				"get", "", "namespaces", "shop", "", true},
			{"the CA checks the Pod of a node proxy", "get", "", "pods", "", "shop", true},
			{"the Ingress status writer re-reads the Ingress", "get", "networking.k8s.io", "ingresses", "", "shop", true},
			{"the Ingress status writer", "update", "networking.k8s.io", "ingresses/status", "", "shop", true},
			{"Events about Ingresses", "create", "", "events", "", "shop", true},
			{"the CA reviews tokens", "create", "authentication.k8s.io", "tokenreviews", "", "", true},
			{"the caBundle patcher updates from its informer's copy",
				"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "istio-sidecar-injector", "", true},
			{"the caBundle patcher never patches",
				"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "istio-sidecar-injector", "", false},
			{"the caBundle patcher never patches",
				"patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "istiod-default-validator", "", false},
			{"nothing writes an Ingress's spec", "update", "networking.k8s.io", "ingresses", "", "shop", false},
			{"nothing writes a namespace", "update", "", "namespaces", "shop", "", false},
			{"nothing creates pods", "create", "", "pods", "", "shop", false},
		} {
			resource, subresource, _ := strings.Cut(tc.resource, "/")
			review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User: "system:serviceaccount:" + releaseNamespace + ":" + serviceAccount,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: tc.verb, Group: tc.group, Resource: resource, Subresource: subresource,
						Name: tc.name, Namespace: tc.namespace,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != tc.allowed {
				t.Errorf("%s %s %s (%s): allowed = %v, want %v", tc.verb, tc.resource, tc.name, tc.why, review.Status.Allowed, tc.allowed)
			}
		}
	})

	// Each rule goes in turn, and comes back before the next case: a core
	// kind and an Istio kind must both be reported, not served around.
	for _, tc := range []struct{ group, resource string }{
		{"security.istio.io", "peerauthentications"},
		{"networking.istio.io", "virtualservices"},
		{"discovery.k8s.io", "endpointslices"},
	} {
		t.Run("without "+tc.resource+" it is reported and stays unready", func(t *testing.T) {
			removeClusterRoleRule(ctx, t, env, tc.group, tc.resource)
			waitFor(t, 30*time.Second, "RBAC to drop the rule", func() error {
				review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
					Spec: authorizationv1.SubjectAccessReviewSpec{
						User: "system:serviceaccount:" + releaseNamespace + ":" + serviceAccount,
						ResourceAttributes: &authorizationv1.ResourceAttributes{
							Verb: "list", Group: tc.group, Resource: tc.resource,
						},
					},
				}, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				if review.Status.Allowed {
					return fmt.Errorf("still allowed")
				}
				return nil
			})
			cp := startPilot(t, asPilot, injectDir, "rbac-missing-"+tc.resource)
			defer cp.stop()
			var line string
			waitFor(t, time.Minute, "a log line naming the missing permission", func() error {
				for _, l := range strings.Split(cp.logs.String(), "\n") {
					lower := strings.ToLower(l)
					if strings.Contains(lower, "forbidden") && strings.Contains(lower, tc.resource) &&
						strings.Contains(lower, "list") {
						line = l
						return nil
					}
				}
				return fmt.Errorf("no such line yet")
			})
			t.Logf("reported: %s", line)
			code, body := cp.get("/ready")
			if code != http.StatusServiceUnavailable {
				t.Errorf("/ready answered %d %q without list on %s", code, body, tc.resource)
			}
			if _, err := clusterNames(ctx, cp.xdsAddr); err == nil {
				t.Errorf("xDS was served from a partial view")
			}
		})
	}
}

// mountedInjectorConfig writes the installed injector ConfigMap to a
// directory, as the Deployment's volume mount does.
func mountedInjectorConfig(ctx context.Context, t *testing.T, env *kubetest.Env) string {
	t.Helper()
	cm, err := env.Kube.CoreV1().ConfigMaps(releaseNamespace).Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for key, value := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, key), []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// caBundlesPatched checks that the injector and this revision's validator
// carry, in every webhook, exactly the mesh root that the CA publishes in
// istio-ca-root-cert: through the chart's RBAC the control plane created
// the root, published it and patched it in.
func caBundlesPatched(ctx context.Context, env *kubetest.Env) error {
	cm, err := env.Kube.CoreV1().ConfigMaps(releaseNamespace).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the published mesh root: %w", err)
	}
	root := []byte(cm.Data["root-cert.pem"])
	if len(root) == 0 {
		return fmt.Errorf("istio-ca-root-cert has no root-cert.pem")
	}
	admission := env.Kube.AdmissionregistrationV1()
	mwc, err := admission.MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range mwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, root) {
			return fmt.Errorf("%s/%s: caBundle is not the mesh root", mwc.Name, w.Name)
		}
	}
	vwc, err := admission.ValidatingWebhookConfigurations().Get(ctx, "istio-validator-"+releaseNamespace, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, root) {
			return fmt.Errorf("%s/%s: caBundle is not the mesh root", vwc.Name, w.Name)
		}
	}
	return nil
}

// removeClusterRoleRule drops resource from the chart's ClusterRole until
// the test ends, when the chart's rules are put back.
func removeClusterRoleRule(ctx context.Context, t *testing.T, env *kubetest.Env, group, resource string) {
	t.Helper()
	roles := env.Kube.RbacV1().ClusterRoles()
	role, err := roles.Get(ctx, "istiod-clusterrole-"+releaseNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	original := slices.Clone(role.Rules)
	t.Cleanup(func() {
		current, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("restore the ClusterRole: %v", err)
			return
		}
		current.Rules = original
		if _, err := roles.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
			t.Errorf("restore the ClusterRole: %v", err)
		}
	})
	removed := false
	rules := role.Rules[:0]
	for _, r := range role.Rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == group {
			kept := []string{}
			for _, res := range r.Resources {
				if res == resource {
					removed = true
					continue
				}
				kept = append(kept, res)
			}
			if r.Resources = kept; len(kept) == 0 {
				continue
			}
		}
		rules = append(rules, r)
	}
	role.Rules = rules
	if !removed {
		t.Fatalf("the ClusterRole has no rule for %s.%s", resource, group)
	}
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pilot is `pilot discovery` in this process, reading the cluster through
// a kubeconfig, on ephemeral ports.
type pilot struct {
	xdsAddr       string
	secureXDSAddr string
	httpURL       string
	logs          *testlog.Buffer
	stop          func()
}

func startPilot(t *testing.T, kubeconfig, injectConfigDir, identity string) *pilot {
	t.Helper()
	opts := bootstrap.DefaultOptions()
	opts.Kubeconfig = kubeconfig
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	// The CA keeps its root in the release namespace, as in the pod.
	opts.SecureXDSAddr = "127.0.0.1:0"
	opts.DebounceAfter = 20 * time.Millisecond
	opts.ShutdownGrace = time.Second
	opts.LeaderElection.Namespace = releaseNamespace
	// The webhooks' certificate comes from the same CA, and they patch its
	// root into the chart's webhook configurations, through the same token.
	opts.Webhook.Addr, opts.Webhook.Namespace = "127.0.0.1:0", releaseNamespace
	opts.Webhook.InjectConfigDir = injectConfigDir
	opts.LeaderElection.Identity = identity
	// Long leases (a late renewal on a loaded machine keeps the lead), a
	// short retry (a released Lease is taken over at once).
	opts.LeaderElection.LeaseDuration, opts.LeaderElection.RenewDeadline, opts.LeaderElection.RetryPeriod =
		15*time.Second, 10*time.Second, 200*time.Millisecond
	logs := &testlog.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := bootstrap.New(opts)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	p := &pilot{xdsAddr: srv.XDSAddr().String(), secureXDSAddr: srv.SecureXDSAddr().String(),
		httpURL: "http://" + srv.HTTPAddr().String(), logs: logs}
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("control plane exited with error: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("control plane log:\n%s", logs.String())
		}
	})
	return p
}

func (p *pilot) get(path string) (int, string) {
	resp, err := http.Get(p.httpURL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// clusterNames asks for every cluster as a sidecar in namespace shop.
// The first answer comes only once the first push context is built.
func clusterNames(ctx context.Context, addr string) (map[string]bool, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	node := &corev3.Node{Id: "sidecar~10.244.0.9~client-0.shop~shop.svc.cluster.local"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, res := range resp.GetResources() {
		c := &clusterv3.Cluster{}
		if err := res.UnmarshalTo(c); err != nil {
			return nil, err
		}
		names[c.GetName()] = true
	}
	return names, nil
}

// waitFor polls check until it succeeds or the deadline passes; deadlines
// bound a broken test, they do not measure speed.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const rbacWorldYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  type: LoadBalancer
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: ["10.244.1.5"]
  conditions: {ready: true}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop}
spec:
  serviceAccountName: web
  nodeName: node-1
  containers: [{name: web, image: example.invalid/web}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ztunnel, namespace: istio-system}
---
apiVersion: v1
kind: Pod
metadata: {name: ztunnel-node-1, namespace: istio-system}
spec:
  serviceAccountName: ztunnel
  nodeName: node-1
  containers: [{name: ztunnel, image: example.invalid/ztunnel}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  ingressClassName: istio
  rules:
  - host: web.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service: {name: web, port: {number: 8080}}
`

// TestValidatorRulesFollowTheValidators: the control plane keeps the
// caBundle of its own validator and, when the base chart's
// istiod-default-validator names its revision, of that one too. The
// default validator belongs to charts/base, so turning off this chart's
// validation.enabled must not take away the rule that lets the control
// plane patch it: that validator would never trust the mesh root, and with
// failurePolicy Fail every unlabelled DestinationRule would be refused.
func TestValidatorRulesFollowTheValidators(t *testing.T) {
	tl := newTools(t)
	for _, tc := range []struct {
		name string
		set  []string
		want []string
	}{
		{"default revision", nil, []string{"istio-validator-istio-system", "istiod-default-validator"}},
		{"without this chart's validator", []string{"validation.enabled=false"},
			[]string{"istio-validator-istio-system", "istiod-default-validator"}},
		{"a revision without its validator", []string{"revision=canary", "validation.enabled=false"},
			[]string{"istio-validator-canary-istio-system", "istiod-default-validator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "istiod", tl.chart("pilot"), "--namespace", releaseNamespace,
				"--show-only", "templates/clusterrole.yaml"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			role := renderedKind[rbacv1.ClusterRole](t, tl.run(t, "", tl.helm, args...), "ClusterRole")
			var names []string
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "validatingwebhookconfigurations") {
					for _, verb := range []string{"list", "watch", "update"} {
						if !slices.Contains(r.Verbs, verb) {
							t.Errorf("the validators' rule lacks %s: %v", verb, r.Verbs)
						}
					}
					names = append(names, r.ResourceNames...)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("validators the control plane may patch: %v, want %v", names, tc.want)
			}
		})
	}
}
