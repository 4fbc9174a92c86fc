package bootstrap

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/webhook"
)

// TestLeaderOnlyWriters checks where the shared writes happen (writers.go):
// a replica that does not hold the Lease still loads, and if need be
// creates, the CA root, yet publishes istio-ca-root-cert and patches the
// webhooks' caBundle only once it leads; with leader election off, the one
// replica does both from the start.
func TestLeaderOnlyWriters(t *testing.T) {
	env := kubetest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, env.Config, kubeconfig)
	kube := env.Kube
	create(t, kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})
	create(t, kube, validator())

	t.Run("a replica that does not lead writes only the CA Secret", func(t *testing.T) {
		// Another replica holds the Lease, renewing it as far as anyone
		// can tell: this one must wait.
		lease := create(t, kube, heldLease("istio-system", DefaultOptions().LeaderElection.Name, "other-replica"))
		revisionLease := create(t, kube, heldLease("istio-system", revisionLeaseName(""), "other-replica"))
		o := localOptions(t)
		o.Kubeconfig = kubeconfig
		o.LeaderElection.Identity = "this-replica"
		o.LeaderElection.LeaseDuration, o.LeaderElection.RenewDeadline, o.LeaderElection.RetryPeriod =
			3*time.Second, 2*time.Second, 200*time.Millisecond
		srv := runServer(t, o)
		create(t, kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "follower"}})
		root := waitRoot(t, kube)
		// Once the replica's own store holds the namespace, a publisher
		// running on it would have had its chance.
		waitUntil(t, "the namespace in the store", func() error {
			if srv.store.Namespace("follower") == nil {
				return errors.New("not yet")
			}
			return nil
		})
		if _, err := kube.CoreV1().ConfigMaps("follower").Get(t.Context(), ca.RootCertConfigMap, metav1.GetOptions{}); err == nil {
			t.Fatal("a replica that does not lead published the root")
		}
		if err := validatorTrusts(kube, root); err == nil {
			t.Fatal("a replica that does not lead patched the caBundle")
		}
		if srv.writeBack.leader.IsLeader() {
			t.Fatal("the replica leads while another holds the Lease")
		}

		// The holder crashes: it stops renewing and never releases the
		// Lease. A candidate trusts its own clock, not renewTime: the
		// Lease expires one duration (5 s) after the candidate last saw it
		// change, which this update is. Then this replica takes over.
		for _, l := range []*coordinationv1.Lease{lease, revisionLease} {
			cur, err := kube.CoordinationV1().Leases("istio-system").Get(t.Context(), l.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			short, stale := int32(5), metav1.NewMicroTime(time.Now().Add(-time.Hour))
			cur.Spec.LeaseDurationSeconds, cur.Spec.RenewTime = &short, &stale
			if _, err := kube.CoordinationV1().Leases("istio-system").Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "the root published by the new leader", func() error {
			_, err := kube.CoreV1().ConfigMaps("follower").Get(t.Context(), ca.RootCertConfigMap, metav1.GetOptions{})
			return err
		})
		waitUntil(t, "the caBundle patched by the new leader", func() error { return validatorTrusts(kube, root) })
	})

	// Revisions installed side by side share the first Lease: its holder,
	// of whichever revision, publishes istio-ca-root-cert. Each revision's
	// webhooks are its own, though, and must trust the root even while
	// another revision leads, or every call to them fails its handshake.
	t.Run("each revision patches its own webhooks while another revision leads", func(t *testing.T) {
		for _, tc := range []struct{ name, revision string }{
			{"a revision beside the default revision", "canary"},
			{"the default revision beside a revision", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				leases := "leases-" + cmp.Or(tc.revision, "default")
				create(t, kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leases}})
				create(t, kube, heldLease(leases, DefaultOptions().LeaderElection.Name, "a-replica-of-another-revision"))
				v := validator()
				v.Name = webhook.ValidatorConfigName(tc.revision, "istio-system")
				v.Labels["istio.io/rev"] = cmp.Or(tc.revision, "default")
				if tc.revision == "" {
					clearCABundle(t, kube)
				} else {
					create(t, kube, v)
				}
				o := localOptions(t)
				o.Kubeconfig = kubeconfig
				o.Revision = tc.revision
				o.LeaderElection.Namespace = leases
				o.LeaderElection.Identity = "replica-of-" + v.Labels["istio.io/rev"]
				o.LeaderElection.LeaseDuration, o.LeaderElection.RenewDeadline, o.LeaderElection.RetryPeriod =
					3*time.Second, 2*time.Second, 200*time.Millisecond
				srv := runServer(t, o)
				root := waitRoot(t, kube)
				waitUntil(t, "the revision's validator trusting the root", func() error {
					return trusts(kube, v.Name, root)
				})
				if srv.writeBack.leader.IsLeader() {
					t.Error("the replica took the shared Lease another revision holds")
				}
				ns := "published-by-" + v.Labels["istio.io/rev"]
				create(t, kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				waitUntil(t, "the namespace in the store", func() error {
					if srv.store.Namespace(ns) == nil {
						return errors.New("not yet")
					}
					return nil
				})
				if _, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), ca.RootCertConfigMap, metav1.GetOptions{}); err == nil {
					t.Error("a replica without the shared Lease published the root")
				}
			})
		}
	})

	t.Run("without election the one replica writes everything", func(t *testing.T) {
		clearCABundle(t, kube)
		o := localOptions(t)
		o.Kubeconfig = kubeconfig
		o.LeaderElection.Enabled = false
		runServer(t, o)
		create(t, kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alone"}})
		root := waitRoot(t, kube)
		waitUntil(t, "the root published", func() error {
			_, err := kube.CoreV1().ConfigMaps("alone").Get(t.Context(), ca.RootCertConfigMap, metav1.GetOptions{})
			return err
		})
		waitUntil(t, "the caBundle patched", func() error { return validatorTrusts(kube, root) })
	})
}

func create[T interface {
	*corev1.Namespace | *admissionregistrationv1.ValidatingWebhookConfiguration | *coordinationv1.Lease
}](t *testing.T, kube kubernetes.Interface, obj T) T {
	t.Helper()
	var err error
	ctx := t.Context()
	switch o := any(obj).(type) {
	case *corev1.Namespace:
		_, err = kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, o, metav1.CreateOptions{})
	case *coordinationv1.Lease:
		_, err = kube.CoordinationV1().Leases(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// validator is the default revision's validator with no caBundle yet.
func validator() *admissionregistrationv1.ValidatingWebhookConfiguration {
	url := "https://127.0.0.1:9/validate"
	none, ignore := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhook.ValidatorConfigName("", "istio-system"),
			Labels: map[string]string{"istio.io/rev": "default"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "rev.validation.istio.io", AdmissionReviewVersions: []string{"v1"},
			SideEffects: &none, FailurePolicy: &ignore,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
		}},
	}
}

// heldLease is a Lease that holder renewed just now and keeps for an hour.
func heldLease(namespace, name, holder string) *coordinationv1.Lease {
	duration, now := int32(3600), metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration,
			AcquireTime: &now, RenewTime: &now},
	}
}

func validatorTrusts(kube kubernetes.Interface, root []byte) error {
	return trusts(kube, webhook.ValidatorConfigName("", "istio-system"), root)
}

// trusts checks the caBundle of the ValidatingWebhookConfiguration name.
func trusts(kube kubernetes.Interface, name string, root []byte) error {
	c, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(),
		name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got := c.Webhooks[0].ClientConfig.CABundle; !bytes.Equal(got, root) {
		return fmt.Errorf("caBundle %q, want the mesh root", got)
	}
	return nil
}

func clearCABundle(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	api := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	c, err := api.Get(t.Context(), webhook.ValidatorConfigName("", "istio-system"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := api.Update(t.Context(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitRoot waits for istio-ca-secret, which every replica may create, and
// returns its root.
func waitRoot(t *testing.T, kube kubernetes.Interface) []byte {
	t.Helper()
	var root []byte
	waitUntil(t, "istio-ca-secret", func() error {
		s, err := kube.CoreV1().Secrets("istio-system").Get(t.Context(), ca.SelfSignedSecretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		root = s.Data[ca.CACertKey]
		return nil
	})
	return root
}

func runServer(t *testing.T, o Options) *Server {
	t.Helper()
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv
}

// waitUntil polls check; the deadline only bounds a broken test.
func waitUntil(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
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
