package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func pod(ns, name string, labels map[string]string, ips ...string) *model.Workload {
	return &model.Workload{Name: name, Namespace: ns, IPs: ips, Labels: labels}
}

func selectingService(ns, name string, selector map[string]string) *model.Service {
	svc := newService(ns, name, nil)
	svc.Selector = selector
	return svc
}

func workloadName(w *model.Workload) string {
	if w == nil {
		return ""
	}
	return w.Namespace + "/" + w.Name
}

func TestWorkloadLookups(t *testing.T) {
	app := func(a string) map[string]string { return map[string]string{"app": a} }
	store := model.NewStore()
	store.UpsertService(selectingService("shop", "cart", app("cart")))
	store.UpsertService(selectingService("shop", "cart-v2", map[string]string{"app": "cart", "version": "v2"}))
	store.UpsertService(selectingService("shop", "all-cart", app("cart")))
	store.UpsertService(newService("shop", "headless-no-selector", nil)) // no selector: selects nothing
	store.UpsertService(selectingService("other", "cart", app("cart")))  // another namespace
	store.UpsertWorkload(pod("shop", "cart-1", map[string]string{"app": "cart", "version": "v1"}, "10.1.0.1", "fd00::1"))
	store.UpsertWorkload(pod("shop", "cart-2", map[string]string{"app": "cart", "version": "v2"}, "10.1.0.2"))
	store.UpsertWorkload(pod("shop", "lonely", app("lonely"), "10.1.0.3"))
	// Host-network Pods share their node's IP.
	store.UpsertWorkload(pod("shop", "node-agent-b", nil, "192.168.0.9"))
	store.UpsertWorkload(pod("shop", "node-agent-a", nil, "192.168.0.9"))
	store.UpsertWorkload(pod("infra", "node-exporter", nil, "192.168.0.9"))
	pc := Build(store, testOpts, nil, nil)

	t.Run("WorkloadByIP", func(t *testing.T) {
		for ip, want := range map[string]string{
			"10.1.0.1": "shop/cart-1", "fd00::1": "shop/cart-1", "10.1.0.2": "shop/cart-2",
			"192.168.0.9": "infra/node-exporter", // first by namespace and name
			"10.9.9.9":    "",
		} {
			if got := workloadName(pc.WorkloadByIP(ip)); got != want {
				t.Errorf("WorkloadByIP(%s) = %q, want %q", ip, got, want)
			}
		}
	})

	t.Run("ServiceTargets", func(t *testing.T) {
		cases := []struct {
			ns, name string
			want     []string
		}{
			{"shop", "cart-1", []string{hostname("shop", "all-cart"), hostname("shop", "cart")}},
			// Sorted by hostname: "cart-v2.shop..." sorts before "cart.shop...".
			{"shop", "cart-2", []string{hostname("shop", "all-cart"), hostname("shop", "cart-v2"), hostname("shop", "cart")}},
			{"shop", "lonely", nil},
		}
		for _, tc := range cases {
			w := pc.WorkloadByIP(map[string]string{"cart-1": "10.1.0.1", "cart-2": "10.1.0.2", "lonely": "10.1.0.3"}[tc.name])
			got := pc.ServiceTargets(w)
			if diff := cmp.Diff(tc.want, hostnamesOrNil(got)); diff != "" {
				t.Errorf("ServiceTargets(%s) (-want +got):\n%s", tc.name, diff)
			}
			if again := pc.ServiceTargets(w); len(got) > 0 && &again[0] != &got[0] {
				t.Errorf("ServiceTargets(%s) recomputed instead of cached", tc.name)
			}
		}
		if got := pc.ServiceTargets(nil); got != nil {
			t.Errorf("ServiceTargets(nil) = %v", got)
		}
	})

	t.Run("WorkloadForProxy", func(t *testing.T) {
		cases := []struct {
			name  string
			proxy *model.Proxy
			want  string
		}{
			{"first known IP", &model.Proxy{Namespace: "shop", IPAddresses: []string{"10.9.9.9", "10.1.0.2"}}, "shop/cart-2"},
			{"IP order decides", &model.Proxy{Namespace: "shop", IPAddresses: []string{"10.1.0.1", "10.1.0.2"}}, "shop/cart-1"},
			{"Pod in another namespace is not the proxy's", &model.Proxy{Namespace: "other", IPAddresses: []string{"10.1.0.1"}}, ""},
			{"no namespace: any namespace", &model.Proxy{IPAddresses: []string{"10.1.0.1"}}, "shop/cart-1"},
			{"unknown IP", &model.Proxy{Namespace: "shop", IPAddresses: []string{"10.9.9.9"}}, ""},
			{"shared IP: the node ID names the Pod",
				&model.Proxy{ID: "sidecar~192.168.0.9~node-agent-b.shop~shop.svc.cluster.local", Namespace: "shop", IPAddresses: []string{"192.168.0.9"}},
				"shop/node-agent-b"},
			{"shared IP: else the first in the namespace",
				&model.Proxy{ID: "sidecar~192.168.0.9~somebody.shop~shop.svc.cluster.local", Namespace: "shop", IPAddresses: []string{"192.168.0.9"}},
				"shop/node-agent-a"},
			{"nil proxy", nil, ""},
		}
		for _, tc := range cases {
			if got := workloadName(pc.WorkloadForProxy(tc.proxy)); got != tc.want {
				t.Errorf("%s: WorkloadForProxy = %q, want %q", tc.name, got, tc.want)
			}
		}
	})
}

func hostnamesOrNil(services []*model.Service) []string {
	if len(services) == 0 {
		return nil
	}
	return hostnames(services)
}

func TestWorkloadIndexesFollowChanges(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(selectingService("shop", "cart", map[string]string{"app": "cart"}))
	store.UpsertWorkload(pod("shop", "cart-1", map[string]string{"app": "cart"}, "10.1.0.1"))
	pc := Build(store, testOpts, nil, nil)
	w := pc.WorkloadByIP("10.1.0.1")
	if got := hostnamesOrNil(pc.ServiceTargets(w)); len(got) != 1 {
		t.Fatalf("targets = %v", got)
	}

	steps := []struct {
		name        string
		change      func() *model.PushRequest
		wantRebuilt []string // of the workload and target indexes
		check       func(t *testing.T, pc *PushContext)
	}{
		{
			name: "a rule change reuses both",
			change: func() *model.PushRequest {
				store.UpsertConfig(ruleConfig("shop", "cart", 0, dr("cart")))
				return pushRequest(key(model.KindDestinationRule, "shop", "cart"))
			},
			check: func(t *testing.T, pc *PushContext) {
				if pc.WorkloadByIP("10.1.0.1") != w {
					t.Error("workload lost")
				}
			},
		},
		{
			name: "a service change recomputes targets only",
			change: func() *model.PushRequest {
				store.UpsertService(selectingService("shop", "cart-all", map[string]string{"app": "cart"}))
				return pushRequest(key(model.KindService, "shop", "cart-all"))
			},
			wantRebuilt: []string{indexServiceTargets},
			check: func(t *testing.T, pc *PushContext) {
				want := []string{hostname("shop", "cart-all"), hostname("shop", "cart")}
				if diff := cmp.Diff(want, hostnamesOrNil(pc.ServiceTargets(pc.WorkloadByIP("10.1.0.1")))); diff != "" {
					t.Errorf("targets (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "a workload change rebuilds both",
			change: func() *model.PushRequest {
				store.UpsertWorkload(pod("shop", "cart-1", map[string]string{"app": "other"}, "10.1.0.7"))
				return pushRequest(key(model.KindWorkload, "shop", "cart-1"))
			},
			wantRebuilt: []string{indexWorkloads, indexServiceTargets},
			check: func(t *testing.T, pc *PushContext) {
				if pc.WorkloadByIP("10.1.0.1") != nil {
					t.Error("old IP still indexed")
				}
				if got := pc.ServiceTargets(pc.WorkloadByIP("10.1.0.7")); got != nil {
					t.Errorf("relabelled Pod still targeted by %v", hostnames(got))
				}
			},
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			prev := pc
			pc = Build(store, testOpts, prev, step.change())
			var rebuilt []string
			for _, name := range pc.BuildInfo().Rebuilt {
				if name == indexWorkloads || name == indexServiceTargets {
					rebuilt = append(rebuilt, name)
				}
			}
			if diff := cmp.Diff(sortedCopy(step.wantRebuilt), sortedCopy(rebuilt)); diff != "" {
				t.Errorf("rebuilt (-want +got):\n%s", diff)
			}
			if (pc.workloads == prev.workloads) == contains(rebuilt, indexWorkloads) ||
				(pc.targets == prev.targets) == contains(rebuilt, indexServiceTargets) {
				t.Error("index identity does not match BuildInfo")
			}
			step.check(t, pc)
		})
	}
}
