package controllers

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	apisecurity "istio.io/api/security/v1beta1"
	apitype "istio.io/api/type/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourcePeerAuthentications creates, updates and deletes
// PeerAuthentications through a real API server (whose CRD schema already
// refuses much) and checks that the store follows, that one meshpilot
// refuses is reported and withdrawn, and that nothing else goes with it.
func TestKubeSourcePeerAuthentications(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t, "peerauth")
	pas := env.Istio.SecurityV1().PeerAuthentications(ns)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mode := func(m apisecurity.PeerAuthentication_MutualTLS_Mode) *apisecurity.PeerAuthentication_MutualTLS {
		return &apisecurity.PeerAuthentication_MutualTLS{Mode: m}
	}
	// Present before the source starts: it arrives in the initial list.
	must(pas.Create(ctx, &securityv1.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       apisecurity.PeerAuthentication{Mtls: mode(apisecurity.PeerAuthentication_MutualTLS_STRICT)},
	}, metav1.CreateOptions{}))
	must(env.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews"}, Spec: apinetworking.DestinationRule{Host: "reviews"},
	}, metav1.CreateOptions{}))

	store, metrics, logs := runSyncedKubeSource(ctx, cancel, t, env)
	// HasSynced means the initial lists are applied.
	if got := paNames(store)["default"]; got == nil || got.Revision == "" || got.Generation != 1 ||
		got.Spec.(*apisecurity.PeerAuthentication).GetMtls().GetMode() != apisecurity.PeerAuthentication_MutualTLS_STRICT {
		t.Fatalf("namespace policy after sync = %+v", got)
	}
	rejected := func() float64 {
		return counterValue(t, metrics.ConfigErrors.WithLabelValues(KubeSourceName, "PeerAuthentication", ReasonInvalid))
	}

	t.Run("workload policy with port-level mTLS, written through v1beta1", func(t *testing.T) {
		must(env.Istio.SecurityV1beta1().PeerAuthentications(ns).Create(ctx, &securityv1beta1.PeerAuthentication{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews"},
			Spec: apisecurity.PeerAuthentication{
				Selector:      &apitype.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews"}},
				PortLevelMtls: map[uint32]*apisecurity.PeerAuthentication_MutualTLS{9080: mode(apisecurity.PeerAuthentication_MutualTLS_DISABLE)},
			},
		}, metav1.CreateOptions{}))
		eventually(t, "workload policy in the store", func() bool {
			c := paNames(store)["reviews"]
			return c != nil && c.Spec.(*apisecurity.PeerAuthentication).GetPortLevelMtls()[9080].GetMode() ==
				apisecurity.PeerAuthentication_MutualTLS_DISABLE
		})
	})

	t.Run("update follows", func(t *testing.T) {
		cur, err := pas.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Mtls.Mode = apisecurity.PeerAuthentication_MutualTLS_PERMISSIVE
		must(pas.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "PERMISSIVE in the store", func() bool {
			c := paNames(store)["default"]
			return c != nil && c.Spec.(*apisecurity.PeerAuthentication).GetMtls().GetMode() ==
				apisecurity.PeerAuthentication_MutualTLS_PERMISSIVE
		})
	})

	t.Run("invalid update withdraws only that policy", func(t *testing.T) {
		// The CRD schema has no rule for label syntax; meshpilot does.
		cur, err := pas.Get(ctx, "reviews", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Selector.MatchLabels = map[string]string{"app": "not a label value!"}
		must(pas.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "invalid policy withdrawn and counted", func() bool {
			got := paNames(store)
			return got["reviews"] == nil && got["default"] != nil && rejected() == 1
		})
		if drNames(store)["reviews"] == nil {
			t.Error("the DestinationRule of the same name was withdrawn too")
		}
		if !strings.Contains(logs.String(), "config object rejected") || !strings.Contains(logs.String(), "kind=PeerAuthentication") ||
			!strings.Contains(logs.String(), `spec.selector.matchLabels: value of \"app\"`) {
			t.Errorf("the rejection is not logged with its kind and reason:\n%s", logs)
		}

		cur, err = pas.Get(ctx, "reviews", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Selector.MatchLabels = map[string]string{"app": "reviews"}
		must(pas.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "fixed policy served again", func() bool { return paNames(store)["reviews"] != nil })
	})

	t.Run("delete", func(t *testing.T) {
		if err := pas.Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "deleted", func() bool {
			got := paNames(store)
			return got["default"] == nil && got["reviews"] != nil
		})
	})

	if got := counterValue(t, metrics.CRDMissing.WithLabelValues(peerAuthentications.crd())); got != 0 {
		t.Errorf("PeerAuthentication CRD reported missing %v times", got)
	}
}

// runSyncedKubeSource runs a Kubernetes source on env that writes to a new
// store, and returns once it has synced, with the store, its metrics and
// its log. When the test ends, cancel stops it, and its Run must return
// no error.
func runSyncedKubeSource(ctx context.Context, cancel context.CancelFunc, t *testing.T, env *kubetest.Env) (model.Store, *Metrics, *testlog.Buffer) {
	t.Helper()
	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	logs := &testlog.Buffer{}
	src, err := NewKubeSource(KubeSourceOptions{Client: env.Kube, IstioClient: env.Istio, Store: store, Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runSynced(ctx, cancel, t, src, "sync")
	return store, metrics, logs
}
