package loadtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Scenario is the size and shape of the mesh under load: Services spread
// over Namespaces, each with one EndpointSlice of Endpoints ready
// addresses, optionally a Pod behind every endpoint and a DestinationRule
// per Service. The standard scenario is 5,000 × 10 in 50 namespaces.
type Scenario struct {
	Services         int    `json:"services"`
	Endpoints        int    `json:"endpoints"`
	Namespaces       int    `json:"namespaces"`
	Pods             bool   `json:"pods"`
	DestinationRules bool   `json:"destinationRules"`
	Domain           string `json:"domain"`
}

// StandardScenario is the scenario of `make bench-load` and of the targets
// in issue 15.
func StandardScenario() Scenario {
	return Scenario{Services: 5000, Endpoints: 10, Namespaces: 50, Domain: "cluster.local"}
}

// servicePort is the one port every Service has; the config churn adds and
// removes a second one.
const servicePort = 80

// Validate refuses sizes the address plan below cannot number.
func (s Scenario) Validate() error {
	var errs []error
	if s.Services < 1 || s.Services > 65536 {
		errs = append(errs, fmt.Errorf("services: want 1..65536, got %d", s.Services))
	}
	if s.Endpoints < 1 || s.Endpoints > 15 {
		errs = append(errs, fmt.Errorf("endpoints: want 1..15 per service, got %d", s.Endpoints))
	}
	if s.Namespaces < 1 || s.Namespaces > s.Services {
		errs = append(errs, fmt.Errorf("namespaces: want 1..services (%d), got %d", s.Services, s.Namespaces))
	}
	if s.Domain == "" {
		errs = append(errs, errors.New("domain must not be empty"))
	}
	return errors.Join(errs...)
}

// Namespace is the namespace of service i.
func (s Scenario) Namespace(i int) string { return fmt.Sprintf("scale-%d", i%s.Namespaces) }

// ServiceName is the name of service i.
func (s Scenario) ServiceName(i int) string { return fmt.Sprintf("svc-%d", i) }

// Host is the FQDN of service i.
func (s Scenario) Host(i int) string {
	return fmt.Sprintf("%s.%s.svc.%s", s.ServiceName(i), s.Namespace(i), s.Domain)
}

// ClusterName is the outbound cluster (and EDS service name) of service i's
// port, as Istio names it.
func (s Scenario) ClusterName(i int, port int32) string {
	return fmt.Sprintf("outbound|%d||%s", port, s.Host(i))
}

// EndpointAddr numbers the endpoints as BenchmarkRestartPopulated does
// (pkg/bootstrap), so that both build the same cluster: 16 addresses per
// service inside 172.16.0.0/12.
func EndpointAddr(i, e int) string {
	return fmt.Sprintf("172.%d.%d.%d", 16+i/4096, (i/16)%256, (i%16)*16+e)
}

// MarkerAddr is the address the endpoint churn writes in generation gen
// (from 1) in place of a service's first endpoint; a client has seen the
// change when its load assignment holds it. 100.64.0.0/10 never collides
// with EndpointAddr.
func MarkerAddr(gen int) string {
	return fmt.Sprintf("100.%d.%d.%d", 64+(gen>>16)&63, (gen>>8)&255, gen&255)
}

func (s Scenario) service(i int, extraPort int32) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: s.ServiceName(i), Namespace: s.Namespace(i)},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: servicePort,
			TargetPort: intstr.FromInt32(8080)}}},
	}
	if extraPort != 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "http-extra", Port: extraPort,
			TargetPort: intstr.FromInt32(8080)})
	}
	if s.Pods {
		svc.Spec.Selector = map[string]string{"app": s.ServiceName(i)}
	}
	return svc
}

func (s Scenario) podName(i, e int) string { return fmt.Sprintf("%s-%d", s.ServiceName(i), e) }

// slice is service i's EndpointSlice; gen > 0 puts MarkerAddr(gen) in
// place of the first endpoint.
func (s Scenario) slice(i, gen int) *discoveryv1.EndpointSlice {
	port, portName, ready := int32(8080), "http", true
	sl := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: s.ServiceName(i) + "-1", Namespace: s.Namespace(i),
			Labels: map[string]string{discoveryv1.LabelServiceName: s.ServiceName(i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for e := range s.Endpoints {
		addr := EndpointAddr(i, e)
		if gen > 0 && e == 0 {
			addr = MarkerAddr(gen)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		if s.Pods {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.Namespace(i), Name: s.podName(i, e)}
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

func (s Scenario) pod(i, e int) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: s.podName(i, e), Namespace: s.Namespace(i),
			Labels: map[string]string{"app": s.ServiceName(i)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: EndpointAddr(i, e),
			PodIPs:     []corev1.PodIP{{IP: EndpointAddr(i, e)}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// destinationRule is service i's DestinationRule; maxRequests > 0 sets
// http2MaxRequests, which both Envoy and grpc-go clusters carry as
// circuit_breakers.thresholds[0].max_requests.
func (s Scenario) destinationRule(i int, maxRequests int32) *networkingv1.DestinationRule {
	dr := &networkingv1.DestinationRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.istio.io/v1", Kind: "DestinationRule"},
		ObjectMeta: metav1.ObjectMeta{Name: s.ServiceName(i), Namespace: s.Namespace(i)},
	}
	dr.Spec.Host = s.Host(i)
	dr.Spec.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN}}}
	if maxRequests > 0 {
		dr.Spec.TrafficPolicy.ConnectionPool = &networking.ConnectionPoolSettings{
			Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: maxRequests}}
	}
	return dr
}

// Inputs is where the scenario's objects live: a real API server, or a
// directory the control plane reads with --config-dir. The Set methods are
// the churn: each is one write, and returns once it is committed.
type Inputs interface {
	// Install writes what installing the mesh puts in place before its
	// control plane starts (for an API server, the istio-system namespace,
	// where the control plane keeps its leases), so that a control plane
	// started on an empty source starts as it would in a cluster.
	Install(ctx context.Context) error
	// Create writes the whole scenario, reporting progress (never
	// concurrently) as services are written.
	Create(ctx context.Context, progress func(done, total int)) error
	// SetEndpoints rewrites service i's EndpointSlice in generation gen.
	SetEndpoints(ctx context.Context, i, gen int) error
	// SetDestinationRule creates or updates service i's DestinationRule.
	SetDestinationRule(ctx context.Context, i int, maxRequests int32) error
	// SetExtraPort gives service i a second port (0 removes it).
	SetExtraPort(ctx context.Context, i int, port int32) error
}

// KubeInputs writes through client-go to a real API server.
type KubeInputs struct {
	Scenario Scenario
	Kube     kubernetes.Interface
	Istio    istioclient.Interface
	// Workers is how many writes are in flight while creating; 0 means 32.
	Workers int

	// sliceVersions holds the resourceVersion (string) of each
	// EndpointSlice (key namespace/name) as the tool last wrote it.
	sliceVersions sync.Map
}

// Create creates the namespaces, then every service's objects with
// Workers writers. Objects that exist already (a second run on the same
// API server) are updated to what the scenario says instead.
func (k *KubeInputs) Create(ctx context.Context, progress func(done, total int)) error {
	if err := k.Scenario.Validate(); err != nil {
		return err
	}
	// istio-system is there in every mesh; the routers live there.
	names := []string{meshNamespace}
	for n := range k.Scenario.Namespaces {
		names = append(names, k.Scenario.Namespace(n))
	}
	if err := k.createNamespaces(ctx, names); err != nil {
		return err
	}
	workers := k.Workers
	if workers <= 0 {
		workers = 32
	}
	return forEach(ctx, k.Scenario.Services, workers, progress, k.createService)
}

// meshNamespace is the control plane's namespace.
const meshNamespace = "istio-system"

// Install implements Inputs.
func (k *KubeInputs) Install(ctx context.Context) error {
	return k.createNamespaces(ctx, []string{meshNamespace})
}

// createNamespaces creates the namespaces that do not exist yet.
func (k *KubeInputs) createNamespaces(ctx context.Context, names []string) error {
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := k.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
	}
	return nil
}

func (k *KubeInputs) createService(ctx context.Context, i int) error {
	s := k.Scenario
	if err := k.SetExtraPort(ctx, i, 0); err != nil {
		return err
	}
	if s.Pods {
		for e := range s.Endpoints {
			if err := k.createPod(ctx, s.pod(i, e)); err != nil {
				return err
			}
		}
	}
	if err := k.SetEndpoints(ctx, i, 0); err != nil {
		return err
	}
	if s.DestinationRules {
		return k.SetDestinationRule(ctx, i, 0)
	}
	return nil
}

// createPod creates a pod and then sets its status, which a create ignores.
func (k *KubeInputs) createPod(ctx context.Context, pod *corev1.Pod) error {
	pods := k.Kube.CoreV1().Pods(pod.Namespace)
	status := pod.Status
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	created.Status = status
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// SetEndpoints implements Inputs. It writes as the EndpointSlice
// controller does: one update, from the copy it holds (the resourceVersion
// of the tool's own last write), not a read and then a write. So the
// endpoint phase's latency starts at the one request that changes the
// slice. The API server refuses a stale version (someone else wrote the
// slice); then it is read and written again.
func (k *KubeInputs) SetEndpoints(ctx context.Context, i, gen int) error {
	want := k.Scenario.slice(i, gen)
	slices := k.Kube.DiscoveryV1().EndpointSlices(want.Namespace)
	key := want.Namespace + "/" + want.Name
	written := func(sl *discoveryv1.EndpointSlice, err error) error {
		if err == nil {
			k.sliceVersions.Store(key, sl.ResourceVersion)
		}
		return err
	}
	return upsert(ctx, "EndpointSlice", want.Namespace, want.Name,
		func() error { return written(slices.Create(ctx, want, metav1.CreateOptions{})) },
		func() error {
			if rv, ok := k.sliceVersions.Load(key); ok {
				want.ResourceVersion = rv.(string)
				err := written(slices.Update(ctx, want, metav1.UpdateOptions{}))
				if !apierrors.IsConflict(err) {
					return err
				}
			}
			cur, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want.ResourceVersion = cur.ResourceVersion
			return written(slices.Update(ctx, want, metav1.UpdateOptions{}))
		}, gen > 0)
}

// SetDestinationRule implements Inputs.
func (k *KubeInputs) SetDestinationRule(ctx context.Context, i int, maxRequests int32) error {
	want := k.Scenario.destinationRule(i, maxRequests)
	drs := k.Istio.NetworkingV1().DestinationRules(want.Namespace)
	return upsert(ctx, "DestinationRule", want.Namespace, want.Name,
		func() error { _, err := drs.Create(ctx, want, metav1.CreateOptions{}); return err },
		func() error {
			cur, err := drs.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want.ResourceVersion = cur.ResourceVersion
			_, err = drs.Update(ctx, want, metav1.UpdateOptions{})
			return err
		}, maxRequests > 0)
}

// SetExtraPort implements Inputs. ClusterIP and friends are defaulted by
// the API server, so the update keeps the live object and swaps its ports.
func (k *KubeInputs) SetExtraPort(ctx context.Context, i int, port int32) error {
	want := k.Scenario.service(i, port)
	svcs := k.Kube.CoreV1().Services(want.Namespace)
	return upsert(ctx, "Service", want.Namespace, want.Name,
		func() error { _, err := svcs.Create(ctx, want, metav1.CreateOptions{}); return err },
		func() error {
			cur, err := svcs.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Ports, cur.Spec.Selector = want.Spec.Ports, want.Spec.Selector
			_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}, port != 0)
}

// upsert writes an object: a churn write (exists) updates, and creates if
// the object is not there; a first write creates, and updates an object
// left by an earlier run.
func upsert(_ context.Context, kind, ns, name string, create, update func() error, exists bool) error {
	var err error
	if exists {
		if err = update(); apierrors.IsNotFound(err) {
			err = create()
		}
	} else if err = create(); apierrors.IsAlreadyExists(err) {
		err = update()
	}
	if err != nil {
		return fmt.Errorf("write %s %s/%s: %w", kind, ns, name, err)
	}
	return nil
}

// forEach runs fn for 0..n-1 on workers goroutines, stopping at the first
// error. progress is called after each success, never concurrently.
func forEach(ctx context.Context, n, workers int, progress func(done, total int), fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done atomic.Int64
		progressMu sync.Mutex
		once       sync.Once
		first      error
		wg         sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				if d := done.Add(1); progress != nil {
					// One call at a time, so progress needs no lock.
					progressMu.Lock()
					progress(int(d), n)
					progressMu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// DirInputs writes the scenario as YAML for the directory source
// (--config-dir): one file per service holding its Service, EndpointSlice,
// Pods and DestinationRule, so that a churn write rewrites one small file.
type DirInputs struct {
	Scenario Scenario
	Dir      string

	mu    sync.Mutex
	state map[int]dirService // what each service's file holds now
}

type dirService struct {
	gen         int
	extraPort   int32
	maxRequests int32
	dr          bool
}

// Install implements Inputs: a directory needs nothing before the control
// plane reads it.
func (d *DirInputs) Install(context.Context) error { return nil }

// Create implements Inputs; it needs an existing directory.
func (d *DirInputs) Create(ctx context.Context, progress func(done, total int)) error {
	if err := d.Scenario.Validate(); err != nil {
		return err
	}
	if fi, err := os.Stat(d.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("config directory %q: must be an existing directory", d.Dir)
	}
	d.mu.Lock()
	d.state = map[int]dirService{}
	d.mu.Unlock()
	return forEach(ctx, d.Scenario.Services, 4, progress, func(_ context.Context, i int) error {
		return d.update(i, func(s *dirService) { s.dr = d.Scenario.DestinationRules })
	})
}

// SetEndpoints implements Inputs.
func (d *DirInputs) SetEndpoints(_ context.Context, i, gen int) error {
	return d.update(i, func(s *dirService) { s.gen = gen })
}

// SetDestinationRule implements Inputs.
func (d *DirInputs) SetDestinationRule(_ context.Context, i int, maxRequests int32) error {
	return d.update(i, func(s *dirService) { s.dr, s.maxRequests = true, maxRequests })
}

// SetExtraPort implements Inputs.
func (d *DirInputs) SetExtraPort(_ context.Context, i int, port int32) error {
	return d.update(i, func(s *dirService) { s.extraPort = port })
}

// update changes what service i's file should hold and rewrites it
// atomically (a rename), so the watcher never reads half a file.
func (d *DirInputs) update(i int, change func(*dirService)) error {
	d.mu.Lock()
	if d.state == nil {
		d.state = map[int]dirService{}
	}
	st := d.state[i]
	change(&st)
	d.state[i] = st
	d.mu.Unlock()

	s := d.Scenario
	objs := []any{s.service(i, st.extraPort), s.slice(i, st.gen)}
	if s.Pods {
		for e := range s.Endpoints {
			objs = append(objs, s.pod(i, e))
		}
	}
	if st.dr {
		objs = append(objs, s.destinationRule(i, st.maxRequests))
	}
	var out []byte
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		out = append(append(out, "---\n"...), b...)
	}
	name := filepath.Join(d.Dir, s.ServiceName(i)+".yaml")
	tmp := filepath.Join(d.Dir, "."+s.ServiceName(i)+".yaml.tmp")
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
