package controllers

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Defaults of IngressStatusOptions.
const (
	DefaultIngressGatewayNamespace = "istio-system"
	DefaultIngressGatewayName      = "istio-ingressgateway"
	defaultStatusWorkers           = 2
)

// IngressStatusOptions configures an IngressStatusWriter.
type IngressStatusOptions struct {
	// Client writes Ingress status (get and update of ingresses/status).
	Client kubernetes.Interface
	// Store is read for Ingresses, IngressClasses and the gateway Service.
	Store model.Store
	// Ownership decides which Ingresses get the gateway's addresses.
	Ownership model.IngressOwnership
	// GatewayService is the ingress gateway's Service, whose addresses are
	// written; istio-system/istio-ingressgateway when empty.
	GatewayService model.NamespacedName
	// Synced, if set, gates the first reconcile: until the store holds the
	// sources' initial lists, a missing gateway Service would wrongly clear
	// every status. Pass the Kubernetes source's Synced.
	Synced <-chan struct{}
	// Workers is the number of concurrent reconciles; 2 when 0.
	Workers int
	Logger  *slog.Logger
	// Metrics may be shared; nil creates unregistered ones.
	Metrics *IngressStatusMetrics
}

// IngressStatusWriter keeps status.loadBalancer.ingress of every Ingress
// meshpilot owns equal to the gateway Service's addresses, and removes its
// addresses from Ingresses it no longer owns. It follows the store, so it
// reacts to Ingress, IngressClass and gateway Service changes alike. Changes
// go through a rate-limited work queue: a burst of events for one Ingress
// costs one reconcile, and failures back off per Ingress.
//
// Run it only on the leader (see LeaderElector): Run may be called again
// after an earlier Run returned, once per leadership term.
type IngressStatusWriter struct {
	opts    IngressStatusOptions
	log     *slog.Logger
	metrics *IngressStatusMetrics
	// target is which Ingresses are owned and which Service's addresses
	// they get: the options' at first, then SetTarget's.
	target atomic.Pointer[statusTarget]

	mu sync.Mutex
	// queue is the current term's queue, nil while not running. Store
	// handlers, registered once for the writer's lifetime, feed it.
	queue workqueue.TypedRateLimitingInterface[statusKey]

	// ours holds, per Ingress, the addresses this writer last left on it
	// while it was owned (written, or found right), so that they are
	// removed when it stops being owned even if the gateway no longer has
	// them. A status entry names no controller: an address that this
	// process did not see as ours (written before a restart, or by another
	// leader) cannot be told from another controller's, so it is kept.
	oursMu sync.Mutex
	ours   map[model.NamespacedName][]model.LoadBalancerIngress
}

type statusTarget struct {
	ownership model.IngressOwnership
	gateway   model.NamespacedName
}

// SetTarget changes which Ingresses are owned and the gateway Service whose
// addresses they get (the mesh config may change both while serving), and
// reconciles every Ingress against the new target.
func (w *IngressStatusWriter) SetTarget(ownership model.IngressOwnership, gatewayService model.NamespacedName) {
	w.target.Store(&statusTarget{ownership: ownership, gateway: gatewayService})
	w.enqueue(statusKey{all: true})
}

// statusKey is one Ingress to reconcile, or every Ingress (all), which a
// worker expands from the store. Class and gateway changes enqueue the
// single all key so that a burst of them lists the store once.
type statusKey struct {
	ingress model.NamespacedName
	all     bool
}

// NewIngressStatusWriter checks the options, subscribes to the store and
// returns a writer; Run starts it.
func NewIngressStatusWriter(opts IngressStatusOptions) (*IngressStatusWriter, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("ingress status: Client is required")
	case opts.Store == nil:
		return nil, errors.New("ingress status: Store is required")
	}
	if opts.GatewayService == (model.NamespacedName{}) {
		opts.GatewayService = model.NamespacedName{Namespace: DefaultIngressGatewayNamespace, Name: DefaultIngressGatewayName}
	}
	if opts.Workers <= 0 {
		opts.Workers = defaultStatusWorkers
	}
	w := &IngressStatusWriter{
		opts:    opts,
		log:     cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "ingress-status"),
		metrics: opts.Metrics,
		ours:    map[model.NamespacedName][]model.LoadBalancerIngress{},
	}
	if w.metrics == nil {
		w.metrics = NewIngressStatusMetrics(nil)
	}
	w.target.Store(&statusTarget{ownership: opts.Ownership, gateway: opts.GatewayService})
	opts.Store.OnChange(w.onStoreChange)
	return w, nil
}

func (w *IngressStatusWriter) onStoreChange(key model.ConfigKey) {
	switch key.Kind {
	case model.KindIngress, model.KindIngressStatus:
		w.enqueue(statusKey{ingress: model.NamespacedName{Namespace: key.Namespace, Name: key.Name}})
	case model.KindIngressClass:
		w.enqueue(statusKey{all: true})
	case model.KindService:
		if gw := w.target.Load().gateway; key.Namespace == gw.Namespace && key.Name == gw.Name {
			w.enqueue(statusKey{all: true})
		}
	}
}

func (w *IngressStatusWriter) enqueue(k statusKey) {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q != nil {
		q.Add(k)
	}
}

// Run reconciles every Ingress, then follows changes until ctx is done.
// It returns once its workers have stopped.
func (w *IngressStatusWriter) Run(ctx context.Context) {
	if w.opts.Synced != nil {
		select {
		case <-w.opts.Synced:
		case <-ctx.Done():
			return
		}
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[statusKey]())
	w.mu.Lock()
	w.queue = q
	w.mu.Unlock()
	// Whatever changed before this term started is caught by one full pass.
	q.Add(statusKey{all: true})
	w.log.Info("ingress status writer started", "gatewayService", w.target.Load().gateway.String())

	var wg sync.WaitGroup
	for range w.opts.Workers {
		wg.Go(func() {
			for w.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	w.mu.Lock()
	if w.queue == q {
		w.queue = nil
	}
	w.mu.Unlock()
	q.ShutDown()
	wg.Wait()
	w.log.Info("ingress status writer stopped")
}

func (w *IngressStatusWriter) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[statusKey]) bool {
	k, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(k)
	if k.all {
		for _, ing := range w.opts.Store.Ingresses() {
			q.Add(statusKey{ingress: ing.Key()})
		}
		q.Forget(k)
		return true
	}
	if err := w.reconcile(ctx, k.ingress); err != nil {
		if ctx.Err() != nil {
			return true // stopping: the next leader reconciles everything anyway
		}
		w.metrics.StatusWrites.WithLabelValues(StatusError).Inc()
		w.log.Warn("ingress status update failed; will retry", "ingress", k.ingress.String(),
			"attempts", q.NumRequeues(k)+1, "error", err)
		q.AddRateLimited(k)
		return true
	}
	q.Forget(k)
	return true
}

// reconcile brings one Ingress's status in line. The store's copy of the
// status decides whether anything needs writing, so an unchanged Ingress
// costs no API call; the write itself re-reads the object and recomputes
// from it, so a stale store never causes a wrong or redundant write.
func (w *IngressStatusWriter) reconcile(ctx context.Context, key model.NamespacedName) error {
	ing := w.opts.Store.Ingress(key)
	if ing == nil {
		w.remember(key, nil)
		return nil // deleted: nothing to write
	}
	target := w.target.Load()
	classes := w.opts.Store.IngressClasses()
	owned := target.ownership.Owns(ing, classes)
	gateway := gatewayAddresses(w.opts.Store.Service(target.gateway))
	ours := w.oursWith(key, gateway)
	if !statusNeedsUpdate(ing.LoadBalancer, gateway, ours, owned) {
		w.metrics.StatusWrites.WithLabelValues(StatusUnchanged).Inc()
		w.remember(key, ownedAddresses(owned, gateway))
		return nil
	}

	ingresses := w.opts.Client.NetworkingV1().Ingresses(key.Namespace)
	var written []networkingv1.IngressLoadBalancerIngress
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := ingresses.Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Ownership too is judged from what was just read: the store may
		// not have seen the Ingress move to another controller yet, and
		// writing our addresses would replace that controller's.
		owned = target.ownership.Owns(ConvertIngress(cur), classes)
		next, changed := nextStatus(cur.Status.LoadBalancer.Ingress, gateway, ours, owned)
		if !changed {
			return nil
		}
		cur.Status.LoadBalancer.Ingress = next
		_, err = ingresses.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			w.metrics.StatusWrites.WithLabelValues(StatusConflict).Inc()
			w.log.Debug("ingress status update conflicted; retrying", "ingress", key.String())
		case err == nil:
			wrote, written = true, next
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted since the store saw it
	case err != nil:
		return err
	}
	w.remember(key, ownedAddresses(owned, gateway))
	if !wrote {
		w.metrics.StatusWrites.WithLabelValues(StatusUnchanged).Inc()
		return nil
	}
	w.metrics.StatusWrites.WithLabelValues(StatusUpdated).Inc()
	w.log.Info("ingress status updated", "ingress", key.String(), "owned", owned,
		"addresses", statusAddressStrings(written))
	return nil
}

// oursWith is what a reconcile of key may remove from an Ingress that is
// not owned: the gateway's addresses and those remembered for key, sorted
// and without repeats.
func (w *IngressStatusWriter) oursWith(key model.NamespacedName, gateway []model.LoadBalancerIngress) []model.LoadBalancerIngress {
	w.oursMu.Lock()
	remembered := w.ours[key]
	w.oursMu.Unlock()
	if len(remembered) == 0 {
		return gateway
	}
	ours := slices.Concat(gateway, remembered)
	slices.SortFunc(ours, compareStatusAddress)
	return slices.Compact(ours)
}

// remember records the addresses an Ingress was left with as ours; none
// once it is deleted or no longer owned, as nothing of ours remains then.
func (w *IngressStatusWriter) remember(key model.NamespacedName, addrs []model.LoadBalancerIngress) {
	w.oursMu.Lock()
	defer w.oursMu.Unlock()
	if len(addrs) == 0 {
		delete(w.ours, key)
	} else {
		w.ours[key] = addrs
	}
}

// ownedAddresses is what a reconciled Ingress holds of ours: the gateway's
// addresses if it is owned, else nothing.
func ownedAddresses(owned bool, gateway []model.LoadBalancerIngress) []model.LoadBalancerIngress {
	if owned {
		return gateway
	}
	return nil
}

// gatewayAddresses is what an owned Ingress's status should say, as Istio
// writes it: the gateway Service's load balancer addresses and its
// external IPs (both reach the gateway), or the name of an ExternalName
// gateway Service; sorted and without repeats. A missing Service has no
// addresses.
func gatewayAddresses(svc *model.Service) []model.LoadBalancerIngress {
	if svc == nil {
		return nil
	}
	if svc.IsExternalName() {
		return []model.LoadBalancerIngress{{Hostname: strings.TrimSuffix(svc.ExternalName, ".")}}
	}
	var out []model.LoadBalancerIngress
	for _, lb := range svc.LoadBalancer {
		if lb.IP != "" || lb.Hostname != "" {
			out = append(out, lb)
		}
	}
	for _, ip := range svc.ExternalIPs {
		if ip != "" {
			out = append(out, model.LoadBalancerIngress{IP: ip})
		}
	}
	slices.SortFunc(out, compareStatusAddress)
	return slices.Compact(out)
}

func compareStatusAddress(a, b model.LoadBalancerIngress) int {
	return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Hostname, b.Hostname))
}

// statusNeedsUpdate compares the store's view of an Ingress's status with
// what it should be: gateway when owned; otherwise none of ours (which
// holds gateway) may remain: other addresses are another controller's
// business.
func statusNeedsUpdate(current, gateway, ours []model.LoadBalancerIngress, owned bool) bool {
	if !owned {
		return slices.ContainsFunc(current, func(a model.LoadBalancerIngress) bool {
			return slices.Contains(ours, a)
		})
	}
	if len(current) != len(gateway) {
		return true
	}
	sorted := slices.SortedFunc(slices.Values(current), compareStatusAddress)
	return !slices.Equal(sorted, gateway)
}

// nextStatus is the status to write over current, and whether it differs.
// Owned Ingresses get exactly the gateway's addresses; others lose only
// ours (see statusNeedsUpdate), keeping anything another controller wrote.
func nextStatus(current []networkingv1.IngressLoadBalancerIngress, gateway, ours []model.LoadBalancerIngress,
	owned bool) ([]networkingv1.IngressLoadBalancerIngress, bool) {
	asModel := make([]model.LoadBalancerIngress, len(current))
	for i, c := range current {
		asModel[i] = model.LoadBalancerIngress{IP: c.IP, Hostname: c.Hostname}
	}
	if !statusNeedsUpdate(asModel, gateway, ours, owned) {
		return current, false
	}
	if !owned {
		return slices.DeleteFunc(slices.Clone(current), func(c networkingv1.IngressLoadBalancerIngress) bool {
			return slices.Contains(ours, model.LoadBalancerIngress{IP: c.IP, Hostname: c.Hostname})
		}), true
	}
	next := make([]networkingv1.IngressLoadBalancerIngress, len(gateway))
	for i, g := range gateway {
		next[i] = networkingv1.IngressLoadBalancerIngress{IP: g.IP, Hostname: g.Hostname}
	}
	return next, true
}

func statusAddressStrings(lbs []networkingv1.IngressLoadBalancerIngress) []string {
	out := make([]string, 0, len(lbs))
	for _, lb := range lbs {
		out = append(out, cmp.Or(lb.IP, lb.Hostname))
	}
	return out
}
