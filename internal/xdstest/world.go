package xdstest

import (
	"testing"

	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// Store converts plain Kubernetes YAML (Services, EndpointSlices, Pods,
// Namespaces, DestinationRules, Ingresses, IngressClasses and TLS Secrets;
// multi-document) with the real ingester, as
// the sources do, and returns the filled store. Any document that does not
// decode or convert fails the test: fixtures must be valid unless a test
// says otherwise with StoreAllowingErrors.
func Store(t testing.TB, yaml string) model.Store {
	t.Helper()
	store, errs := StoreAllowingErrors(t, yaml)
	for _, err := range errs {
		t.Errorf("fixture: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return store
}

// StoreAllowingErrors is Store for fixtures that hold invalid objects on
// purpose; it returns what the ingester refused.
func StoreAllowingErrors(t testing.TB, yaml string) (model.Store, []error) {
	t.Helper()
	store := model.NewStore()
	ingester := controllers.NewIngester(controllers.IngesterOptions{Store: store})
	objs, errs := controllers.DecodeYAML([]byte(yaml))
	for _, obj := range objs {
		if err := ingester.Upsert(obj); err != nil {
			errs = append(errs, err)
		}
	}
	return store, errs
}
