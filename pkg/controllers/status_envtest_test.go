package controllers

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// statusPutCounter counts the Ingress status updates a client sends, per
// Ingress name, and can run a hook just before the next one goes out.
type statusPutCounter struct {
	next http.RoundTripper

	mu     sync.Mutex
	puts   map[string]int
	before func()
}

func (c *statusPutCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	if req.Method == http.MethodPut && strings.HasSuffix(p, "/status") && strings.Contains(p, "/ingresses/") {
		c.mu.Lock()
		c.puts[path.Base(path.Dir(p))]++
		hook := c.before
		c.before = nil
		c.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
	return c.next.RoundTrip(req)
}

func (c *statusPutCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[name]
}

func (c *statusPutCounter) beforeNextPut(hook func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = hook
}

// countingClient is a clientset whose Ingress status writes are counted.
func countingClient(t *testing.T, cfg *rest.Config) (kubernetes.Interface, *statusPutCounter) {
	t.Helper()
	counter := &statusPutCounter{puts: map[string]int{}}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{} // the tests use deprecated spec.externalIPs on purpose
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, counter
}

// replica is one control plane's write side: its own source, store,
// status writer and problem reporter, behind its own elector.
type replica struct {
	store    model.Store
	puts     *statusPutCounter
	writer   *IngressStatusWriter
	reporter *IngressProblemReporter
	elector  *LeaderElector
	metrics  *IngressStatusMetrics
	stop     func()
}

type replicaOptions struct {
	gateway  model.NamespacedName
	identity string // "" runs the writer and reporter without an elector
	leaseNS  string
}

func startReplica(t *testing.T, env *kubetest.Env, o replicaOptions) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{store: model.NewStore(), metrics: NewIngressStatusMetrics(prometheus.NewRegistry())}
	logs := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil)).With("replica", o.identity)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica %q logs:\n%s", o.identity, logs.String())
		}
	})
	src, err := NewKubeSource(KubeSourceOptions{Client: env.Kube, IstioClient: env.Istio, Store: r.store,
		DomainSuffix: "cluster.local", Metrics: NewMetrics(nil), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	var client kubernetes.Interface
	client, r.puts = countingClient(t, env.Config)
	r.writer, err = NewIngressStatusWriter(IngressStatusOptions{Client: client, Store: r.store,
		Ownership:      model.IngressOwnership{Class: "istio", Mode: model.IngressModeStrict},
		GatewayService: o.gateway, Synced: src.Synced(), Logger: logger, Metrics: r.metrics})
	if err != nil {
		t.Fatal(err)
	}
	r.reporter, err = NewIngressProblemReporter(IngressProblemOptions{Client: env.Kube,
		Component: "meshpilot-" + o.identity, Logger: logger, Metrics: r.metrics})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := src.Run(ctx); err != nil {
			t.Errorf("source: %v", err)
		}
	})
	if o.identity == "" {
		wg.Go(func() { r.writer.Run(ctx) })
		wg.Go(func() { r.reporter.Run(ctx) })
	} else {
		r.elector, err = NewLeaderElector(LeaderOptions{Client: env.Kube, Namespace: o.leaseNS,
			Identity: o.identity, LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline,
			RetryPeriod: 200 * time.Millisecond, Logger: logger, Metrics: r.metrics})
		if err != nil {
			t.Fatal(err)
		}
		r.elector.AddRunFunction(r.writer.Run).AddRunFunction(r.reporter.Run)
		wg.Go(func() { r.elector.Run(ctx) })
	}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(r.stop)
	eventually(t, "source synced", src.HasSynced)
	return r
}

func lbStatus(entries ...k8snetworkingv1.IngressLoadBalancerIngress) []k8snetworkingv1.IngressLoadBalancerIngress {
	return entries
}

func statusIngress(name, class string) *k8snetworkingv1.Ingress {
	return &k8snetworkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: k8snetworkingv1.IngressSpec{
			IngressClassName: &class,
			DefaultBackend: &k8snetworkingv1.IngressBackend{Service: &k8snetworkingv1.IngressServiceBackend{
				Name: "web", Port: k8snetworkingv1.ServiceBackendPort{Number: 80}}},
		},
	}
}

// TestIngressStatusAgainstAPIServer writes Ingress status through a real
// API server: from the gateway Service's load balancer, following its
// changes, falling back to external IPs, never writing what is already
// there, retrying conflicts, clearing what it wrote when it stops owning
// an Ingress; then two replicas hand leadership over.
func TestIngressStatusAgainstAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx := context.Background()
	quiet := rest.CopyConfig(env.Config)
	quiet.WarningHandler = rest.NoWarnings{} // the test uses deprecated spec.externalIPs on purpose
	kube, err := kubernetes.NewForConfig(quiet)
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kube.NetworkingV1().IngressClasses().Create(ctx, &k8snetworkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec:       k8snetworkingv1.IngressClassSpec{Controller: model.IngressController}}, metav1.CreateOptions{}))
	must(kube.NetworkingV1().IngressClasses().Create(ctx, &k8snetworkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec:       k8snetworkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}, metav1.CreateOptions{}))

	ingressStatus := func(t *testing.T, ns, name string) *k8snetworkingv1.Ingress {
		t.Helper()
		ing, err := kube.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ing
	}
	waitStatus := func(t *testing.T, what, ns, name string, want []k8snetworkingv1.IngressLoadBalancerIngress) {
		t.Helper()
		var got []k8snetworkingv1.IngressLoadBalancerIngress
		eventually(t, what, func() bool {
			got = ingressStatus(t, ns, name).Status.LoadBalancer.Ingress
			return cmp.Equal(got, want)
		})
	}
	updateService := func(t *testing.T, ns, name string, mutate func(*corev1.Service), status bool) {
		t.Helper()
		svcs := kube.CoreV1().Services(ns)
		svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(svc)
		if status {
			must(svcs.UpdateStatus(ctx, svc, metav1.UpdateOptions{}))
		} else {
			must(svcs.Update(ctx, svc, metav1.UpdateOptions{}))
		}
	}
	createGateway := func(t *testing.T, ns string, externalIPs ...string) model.NamespacedName {
		t.Helper()
		must(kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "ingressgateway"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: externalIPs,
				Selector: map[string]string{"istio": "ingressgateway"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}},
		}, metav1.CreateOptions{}))
		return model.NamespacedName{Namespace: ns, Name: "ingressgateway"}
	}

	t.Run("status follows the gateway service", func(t *testing.T) {
		ns := env.Namespace(t, "status")
		gateway := createGateway(t, ns)
		ingresses := kube.NetworkingV1().Ingresses(ns)
		must(ingresses.Create(ctx, statusIngress("web", "istio"), metav1.CreateOptions{}))
		// Another controller's Ingress, with that controller's address.
		other, err := ingresses.Create(ctx, statusIngress("other", "nginx"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		other.Status.LoadBalancer.Ingress = lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "203.0.113.7"})
		must(ingresses.UpdateStatus(ctx, other, metav1.UpdateOptions{}))

		r := startReplica(t, env, replicaOptions{gateway: gateway})
		writes := func(result string) float64 { return counterValue(t, r.metrics.StatusWrites.WithLabelValues(result)) }
		// The gateway has no address yet: nothing to write.
		eventually(t, "first pass", func() bool { return writes(StatusUnchanged) >= 2 })

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example.com"}}
		}, true)
		waitStatus(t, "load balancer address and hostname", ns, "web", lbStatus(
			k8snetworkingv1.IngressLoadBalancerIngress{Hostname: "lb.example.com"},
			k8snetworkingv1.IngressLoadBalancerIngress{IP: "198.51.100.1"}))

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.2"}}
		}, true)
		waitStatus(t, "load balancer change", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "198.51.100.2"}))

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.5"} }, false)
		waitStatus(t, "load balancer address and external IP", ns, "web", lbStatus(
			k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.5"},
			k8snetworkingv1.IngressLoadBalancerIngress{IP: "198.51.100.2"}))

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = nil }, true)
		waitStatus(t, "external IP alone", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.5"}))

		t.Run("no write when unchanged", func(t *testing.T) {
			eventually(t, "store sees the written status", func() bool {
				ing := r.store.Ingress(model.NamespacedName{Namespace: ns, Name: "web"})
				return ing != nil && len(ing.LoadBalancer) == 1 && ing.LoadBalancer[0].IP == "192.0.2.5"
			})
			before := ingressStatus(t, ns, "web").ResourceVersion
			puts, unchanged := r.puts.count("web"), writes(StatusUnchanged)
			// A gateway change that does not move its addresses makes the
			// writer reconcile every Ingress again.
			updateService(t, ns, "ingressgateway", func(s *corev1.Service) {
				s.Labels = map[string]string{"touched": "yes"}
			}, false)
			eventually(t, "reconciles of both ingresses", func() bool { return writes(StatusUnchanged) >= unchanged+2 })
			if after := ingressStatus(t, ns, "web").ResourceVersion; after != before {
				t.Errorf("resourceVersion moved from %s to %s without a status change", before, after)
			}
			if got := r.puts.count("web"); got != puts {
				t.Errorf("%d status updates sent for an unchanged status", got-puts)
			}
		})

		t.Run("conflicts are retried", func(t *testing.T) {
			// Just before the writer's update goes out, someone else
			// changes the Ingress, so the update carries a stale
			// resourceVersion.
			r.puts.beforeNextPut(func() {
				ing, err := ingresses.Get(ctx, "web", metav1.GetOptions{})
				if err == nil {
					ing.Annotations = map[string]string{"example.com/touched": "yes"}
					_, err = ingresses.Update(ctx, ing, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("concurrent update: %v", err) // Errorf: this runs on the writer's goroutine
				}
			})
			updateService(t, ns, "ingressgateway", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.6"} }, false)
			waitStatus(t, "status after a conflict", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.6"}))
			if got := writes(StatusConflict); got < 1 {
				t.Errorf("conflicts counted = %v, want at least 1", got)
			}
			if got := ingressStatus(t, ns, "web").Annotations["example.com/touched"]; got != "yes" {
				t.Errorf("the concurrent change was lost: annotation = %q", got)
			}
		})

		t.Run("cleared when no longer owned", func(t *testing.T) {
			ing := ingressStatus(t, ns, "web")
			ing.Spec.IngressClassName = ptr("nginx")
			must(ingresses.Update(ctx, ing, metav1.UpdateOptions{}))
			waitStatus(t, "status cleared", ns, "web", nil)
		})

		if got := ingressStatus(t, ns, "other").Status.LoadBalancer.Ingress; !cmp.Equal(got,
			lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "203.0.113.7"})) {
			t.Errorf("another controller's status changed: %+v", got)
		}
		if got := r.puts.count("other"); got != 0 {
			t.Errorf("%d status updates sent for another controller's Ingress", got)
		}
		r.stop()
	})

	t.Run("leader handover", func(t *testing.T) {
		ns := env.Namespace(t, "handover")
		gateway := createGateway(t, ns, "192.0.2.20")
		must(kube.NetworkingV1().Ingresses(ns).Create(ctx, statusIngress("web", "istio"), metav1.CreateOptions{}))
		problems := func(list ...string) map[model.NamespacedName][]string {
			return map[model.NamespacedName][]string{{Namespace: ns, Name: "web"}: list}
		}

		a := startReplica(t, env, replicaOptions{gateway: gateway, identity: "a", leaseNS: ns})
		eventually(t, "a leads", a.elector.IsLeader)
		b := startReplica(t, env, replicaOptions{gateway: gateway, identity: "b", leaseNS: ns})
		waitStatus(t, "written by the leader", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.20"}))
		// Every replica's push reports the same problems.
		a.reporter.Report(problems(`service "web" not found`))
		b.reporter.Report(problems(`service "web" not found`))

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.21"} }, false)
		waitStatus(t, "gateway change written", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.21"}))
		eventually(t, "b has seen the change", func() bool {
			svc := b.store.Service(gateway)
			return svc != nil && len(svc.ExternalIPs) == 1 && svc.ExternalIPs[0] == "192.0.2.21"
		})
		if b.elector.IsLeader() || b.puts.count("web") != 0 {
			t.Fatalf("the standby wrote: leader=%v, updates=%d", b.elector.IsLeader(), b.puts.count("web"))
		}
		eventually(t, "the leader's event", func() bool { return len(problemEvents(t, kube, ns, "meshpilot-a")) == 1 })

		aPuts := a.puts.count("web")
		a.stop()
		// ReleaseOnCancel: a gave the Lease up on its way out rather than
		// letting it expire.
		lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if holder := ptrValue(lease.Spec.HolderIdentity); holder == "a" {
			t.Errorf("stopped leader still holds the lease")
		}
		eventually(t, "b takes over", b.elector.IsLeader)
		eventually(t, "lease names b", func() bool {
			lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, DefaultLeaseName, metav1.GetOptions{})
			return err == nil && ptrValue(lease.Spec.HolderIdentity) == "b"
		})

		updateService(t, ns, "ingressgateway", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.22"} }, false)
		waitStatus(t, "written by the new leader", ns, "web", lbStatus(k8snetworkingv1.IngressLoadBalancerIngress{IP: "192.0.2.22"}))
		if b.puts.count("web") == 0 || a.puts.count("web") != aPuts {
			t.Errorf("updates after handover: a %d (had %d), b %d", a.puts.count("web"), aPuts, b.puts.count("web"))
		}

		b.reporter.Report(problems(`service "web" not found`, `path "x" must start with /`))
		eventually(t, "the new leader's events", func() bool {
			return slices.Contains(problemEvents(t, kube, ns, "meshpilot-b"), `path "x" must start with /`)
		})
		if got := problemEvents(t, kube, ns, "meshpilot-a"); !cmp.Equal(got, []string{`service "web" not found`}) {
			t.Errorf("events from the old leader = %q", got)
		}
	})
}

// A replica that stops gives its Lease up (ReleaseOnCancel), so handovers
// take one retry period; the lease stays long so that a renewal made late
// by a loaded machine never moves leadership mid-test.
const (
	testLeaseDuration = 15 * time.Second
	testRenewDeadline = 10 * time.Second
)

// problemEvents lists the messages of IngressProblem events about the web
// Ingress sent by one component.
func problemEvents(t *testing.T, kube kubernetes.Interface, ns, component string) []string {
	t.Helper()
	list, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Source.Component == component && e.Reason == EventReasonIngressProblem &&
			e.InvolvedObject.Kind == "Ingress" && e.InvolvedObject.Name == "web" && e.InvolvedObject.UID != "" &&
			e.Type == corev1.EventTypeWarning {
			out = append(out, e.Message)
		}
	}
	slices.Sort(out)
	return out
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
