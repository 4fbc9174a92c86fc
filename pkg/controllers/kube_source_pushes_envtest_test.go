package controllers

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// changeLog records the store's announcements, each of which the control
// plane turns into a push request.
type changeLog struct {
	mu   sync.Mutex
	keys []model.ConfigKey
}

func (l *changeLog) add(k model.ConfigKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, k)
}

// has reports whether k has been announced since the last take. The store
// announces a change just after it is visible to readers, so a test waits
// for both before it takes the log.
func (l *changeLog) has(k model.ConfigKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.keys, k)
}

func (l *changeLog) take() []model.ConfigKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.keys
	l.keys = nil
	return out
}

// TestKubeSourcePushesOnlyEffectiveChanges updates objects through a real
// API server in ways meshpilot must not push in full. An update that
// announces nothing is proven by a later marker update of the same object:
// one informer delivers an object's updates in order, so once the marker
// has arrived, so has everything before it.
func TestKubeSourcePushesOnlyEffectiveChanges(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t, "pushes")
	kube := env.Kube
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}, metav1.CreateOptions{}))
	// The slice names the Pod before the Pod exists, as when the Pod is
	// still being scheduled.
	must(kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "reviews-a", Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](9080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "reviews-1", Namespace: ns}}},
	}, metav1.CreateOptions{}))

	store := model.NewStore()
	log := &changeLog{}
	store.OnChange(log.add)
	src, err := NewKubeSource(KubeSourceOptions{Client: kube, IstioClient: env.Istio, Store: store,
		DomainSuffix: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	runSynced(ctx, cancel, t, src, "sync")
	svcKey := model.NamespacedName{Namespace: ns, Name: "reviews"}
	eventually(t, "service", func() bool { return store.Service(svcKey) != nil })
	endpointLabel := func(key string) string {
		for _, e := range store.Endpoints(svcKey) {
			return e.Labels[key]
		}
		return ""
	}
	full := func(keys []model.ConfigKey) []model.ConfigKey {
		var out []model.ConfigKey
		for _, k := range keys {
			if model.NewPushRequest(k, time.Now()).Full {
				out = append(out, k)
			}
		}
		return out
	}
	serviceChange := model.ConfigKey{Kind: model.KindService, Namespace: ns, Name: "reviews"}
	podChange := model.ConfigKey{Kind: model.KindWorkload, Namespace: ns, Name: "reviews-1"}
	endpointsChange := model.ConfigKey{Kind: model.KindEndpoints, Namespace: ns, Name: "reviews"}

	t.Run("service annotation meshpilot does not read", func(t *testing.T) {
		log.take()
		svc, err := kube.CoreV1().Services(ns).Get(ctx, "reviews", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Annotations = map[string]string{"example.com/owner": "team-a"}
		svc, err = kube.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The marker: Service labels are part of the model.
		svc.Labels = map[string]string{"marker": "1"}
		must(kube.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}))
		eventually(t, "marker", func() bool {
			return store.Service(svcKey).Labels["marker"] == "1" && log.has(serviceChange)
		})
		if got := log.take(); !slices.Equal(got, []model.ConfigKey{serviceChange}) {
			t.Errorf("changes %v, want only the marker's %v", got, serviceChange)
		}
	})

	t.Run("pending pod appears", func(t *testing.T) {
		log.take()
		must(kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews-1", Labels: map[string]string{"app": "reviews", "version": "v1"}},
			Spec: corev1.PodSpec{ServiceAccountName: "default",
				Containers: []corev1.Container{{Name: "app", Image: "example.com/app"}}},
		}, metav1.CreateOptions{}))
		// The store writes the workload before it re-converts the endpoints.
		eventually(t, "endpoint labels", func() bool { return endpointLabel("version") == "v1" && log.has(endpointsChange) })
		got := log.take()
		if len(got) == 0 || len(full(got)) > 0 {
			t.Errorf("changes %v: want endpoint changes only", got)
		}
	})

	t.Run("pod gets its IP", func(t *testing.T) {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, "reviews-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}
		must(kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}))
		eventually(t, "workload IP", func() bool {
			ws := store.Workloads()
			return len(ws) == 1 && slices.Equal(ws[0].IPs, []string{"10.244.1.5"}) && log.has(podChange)
		})
		// A proxy may now run in it: that is a full push.
		if got := full(log.take()); !slices.Equal(got, []model.ConfigKey{podChange}) {
			t.Errorf("full changes %v, want %v", got, podChange)
		}
	})

	t.Run("pod status conditions only", func(t *testing.T) {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, "reviews-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Readiness is sent to node proxies; the other conditions are not.
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		pod, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The marker: a relabel, which re-converts the endpoints.
		pod.Labels["version"] = "v2"
		must(kube.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}))
		eventually(t, "marker", func() bool { return endpointLabel("version") == "v2" && log.has(endpointsChange) })
		if got := log.take(); !slices.Equal(got, []model.ConfigKey{podChange, endpointsChange}) {
			t.Errorf("changes %v, want only the marker's %v", got, []model.ConfigKey{podChange, endpointsChange})
		}
	})
}
