package controllers

import (
	"context"
	"strings"
	"testing"

	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// subsetOf is the subset the first destination of a stored
// VirtualService's first HTTP route names, "" when there is none.
func subsetOf(c *model.Config) string {
	if c == nil {
		return ""
	}
	routes := c.Spec.(*apinetworking.VirtualService).GetHttp()
	if len(routes) == 0 || len(routes[0].GetRoute()) == 0 {
		return ""
	}
	return routes[0].GetRoute()[0].GetDestination().GetSubset()
}

// TestKubeSourceVirtualServices creates, updates and deletes
// VirtualServices through a real API server (whose CRD schema already
// refuses much) and checks that the store follows, that one meshpilot
// refuses is reported and withdrawn, and that nothing else goes with it.
func TestKubeSourceVirtualServices(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t, "virtualservice")
	vss := env.Istio.NetworkingV1().VirtualServices(ns)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Present before the source starts: it arrives in the initial list.
	must(vss.Create(ctx, &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"}, Spec: vsToSubset("echo", "v2"),
	}, metav1.CreateOptions{}))
	must(env.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"}, Spec: apinetworking.DestinationRule{Host: "echo"},
	}, metav1.CreateOptions{}))

	store, metrics, logs := runSyncedKubeSource(ctx, cancel, t, env)
	// HasSynced means the initial lists are applied.
	if got := vsNames(store)["echo"]; got == nil || got.Revision == "" || got.Generation != 1 || subsetOf(got) != "v2" {
		t.Fatalf("VirtualService after sync = %+v", got)
	}
	rejected := func() float64 {
		return counterValue(t, metrics.ConfigErrors.WithLabelValues(KubeSourceName, "VirtualService", ReasonInvalid))
	}

	t.Run("written through v1beta1", func(t *testing.T) {
		must(env.Istio.NetworkingV1beta1().VirtualServices(ns).Create(ctx, &networkingv1beta1.VirtualService{
			ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: vsToSubset("other", "v1"),
		}, metav1.CreateOptions{}))
		eventually(t, "v1beta1 VirtualService in the store", func() bool { return subsetOf(vsNames(store)["other"]) == "v1" })
	})

	t.Run("update follows", func(t *testing.T) {
		cur, err := vss.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Http[0].Route[0].Destination.Subset = "v1"
		must(vss.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "subset v1 in the store", func() bool { return subsetOf(vsNames(store)["echo"]) == "v1" })
	})

	t.Run("invalid update withdraws only that VirtualService", func(t *testing.T) {
		// The CRD schema takes any string as a subset; meshpilot wants a
		// DNS label, and one action per route.
		cur, err := vss.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Http[0].Route[0].Destination.Subset = "Not_A_Label"
		cur.Spec.Http[0].Redirect = &apinetworking.HTTPRedirect{Uri: "/elsewhere"}
		must(vss.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "invalid VirtualService withdrawn and counted", func() bool {
			got := vsNames(store)
			return got["echo"] == nil && got["other"] != nil && rejected() == 1
		})
		if drNames(store)["echo"] == nil {
			t.Error("the DestinationRule of the same name was withdrawn too")
		}
		for _, want := range []string{"config object rejected", "kind=VirtualService", "name=echo",
			"spec.http[0]: route and redirect are mutually exclusive", "spec.http[0].route[0].destination.subset"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the rejection log lacks %q:\n%s", want, logs)
			}
		}

		cur, err = vss.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Http[0].Route[0].Destination.Subset = "v2"
		cur.Spec.Http[0].Redirect = nil
		must(vss.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "fixed VirtualService served again", func() bool { return subsetOf(vsNames(store)["echo"]) == "v2" })
	})

	t.Run("delete", func(t *testing.T) {
		if err := vss.Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "deleted", func() bool {
			got := vsNames(store)
			return got["other"] == nil && got["echo"] != nil
		})
	})

	if got := counterValue(t, metrics.CRDMissing.WithLabelValues(virtualServices.crd())); got != 0 {
		t.Errorf("VirtualService CRD reported missing %v times", got)
	}
	if got := counterValue(t, metrics.IstioConfigEvents.WithLabelValues("VirtualService", "add")); got < 2 {
		t.Errorf("pilot_k8s_cfg_events{type=VirtualService,event=add} = %v, want at least 2", got)
	}
}
