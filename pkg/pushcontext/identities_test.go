package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestServiceIdentities(t *testing.T) {
	ep := func(addr, ns, sa string) *model.Endpoint {
		e := newEndpoint(addr, "http", nil)
		e.Namespace, e.ServiceAccount = ns, sa
		return e
	}
	cases := []struct {
		name string
		eps  []*model.Endpoint
		want []string
	}{
		{name: "no endpoints"},
		{name: "endpoints without pods have no identity", eps: []*model.Endpoint{ep("10.0.0.1", "", "")}},
		{
			name: "one account behind every endpoint",
			eps:  []*model.Endpoint{ep("10.0.0.1", "shop", "cart"), ep("10.0.0.2", "shop", "cart")},
			want: []string{"spiffe://example.org/ns/shop/sa/cart"},
		},
		{
			name: "several accounts, sorted and once each",
			eps: []*model.Endpoint{
				ep("10.0.0.1", "shop", "cart-v2"), ep("10.0.0.2", "", ""), ep("10.0.0.3", "shop", "cart"),
				ep("10.0.0.4", "shop", "cart-v2"), ep("10.0.0.5", "other", "cart"),
			},
			want: []string{"spiffe://example.org/ns/other/sa/cart", "spiffe://example.org/ns/shop/sa/cart", "spiffe://example.org/ns/shop/sa/cart-v2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			svc := newService("shop", "cart", nil)
			store.UpsertService(svc)
			store.SetEndpoints(svc.Key(), "s", tc.eps)
			opts := testOpts
			opts.TrustDomain = "example.org"
			pc := Build(store, opts, nil, nil)
			got := pc.ServiceIdentities(svc.Hostname)
			if diff := cmp.Diff(tc.want, got.List()); diff != "" {
				t.Errorf("identities (-want +got):\n%s", diff)
			}
			if got.Empty() != (len(tc.want) == 0) {
				t.Errorf("Empty() = %v with %d identities", got.Empty(), len(tc.want))
			}
		})
	}
}

// A new identity behind a service is reported by the endpoint fast path,
// so the push loop can push clusters (which verify servers against it);
// an endpoint change with the same identities is not.
func TestUpdateEndpointsReportsIdentityChanges(t *testing.T) {
	store := model.NewStore()
	svc := newService("shop", "cart", nil)
	store.UpsertService(svc)
	withAccount := func(addr, sa string) *model.Endpoint {
		e := newEndpoint(addr, "http", nil)
		e.Namespace, e.ServiceAccount = "shop", sa
		return e
	}
	store.SetEndpoints(svc.Key(), "s", []*model.Endpoint{withAccount("10.0.0.1", "cart")})
	pc := Build(store, testOpts, nil, nil)

	store.SetEndpoints(svc.Key(), "s", []*model.Endpoint{withAccount("10.0.0.1", "cart"), withAccount("10.0.0.2", "cart")})
	update := pc.UpdateEndpoints(store, []model.NamespacedName{svc.Key()})
	if len(update.Hosts) != 1 || len(update.IdentitiesChanged) != 0 {
		t.Errorf("same identity, more endpoints: %+v, want the host changed and no identity change", update)
	}
	store.SetEndpoints(svc.Key(), "s", []*model.Endpoint{withAccount("10.0.0.1", "cart"), withAccount("10.0.0.3", "cart-v2")})
	update = pc.UpdateEndpoints(store, []model.NamespacedName{svc.Key()})
	if diff := cmp.Diff([]model.NamespacedName{svc.Key()}, update.IdentitiesChanged); diff != "" {
		t.Errorf("identities changed (-want +got):\n%s", diff)
	}
}
