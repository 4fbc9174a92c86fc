package ca

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
)

// TestRootCertPublisher runs the publisher against a real API server: the
// root appears in namespaces that existed before it started and in ones
// created later, and an edited or deleted ConfigMap is put back.
func TestRootCertPublisher(t *testing.T) {
	t.Parallel()
	env := kubetest.StartWithoutCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := NewSelfSigned(Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := string(a.RootPEM())
	before := env.Namespace(t, "before")

	var logs testlog.Buffer
	p := NewRootCertPublisher(env.Kube, a.RootPEM(), slog.New(slog.NewTextHandler(&logs, nil)))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("publisher log:\n%s", logs.String())
		}
	})

	cms := func(ns string) interface {
		Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	} {
		return env.Kube.CoreV1().ConfigMaps(ns)
	}
	published := func(ns string) func() error {
		return func() error {
			cm, err := cms(ns).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := cm.Data[RootCertKey]; got != root {
				return fmt.Errorf("%s/%s holds %q, want the root", ns, RootCertConfigMap, got)
			}
			return nil
		}
	}

	t.Run("namespaces that existed at start", func(t *testing.T) {
		for _, ns := range []string{before, "default", "kube-system"} {
			eventually(t, "the root in "+ns, published(ns))
		}
	})

	after := env.Namespace(t, "after")
	t.Run("a namespace created later", func(t *testing.T) {
		eventually(t, "the root in "+after, published(after))
	})

	t.Run("an edited ConfigMap is repaired", func(t *testing.T) {
		cm, err := cms(after).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[RootCertKey] = "-----BEGIN CERTIFICATE-----\nforged\n-----END CERTIFICATE-----\n"
		if _, err := env.Kube.CoreV1().ConfigMaps(after).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the root restored in "+after, published(after))
	})

	t.Run("a deleted ConfigMap is recreated", func(t *testing.T) {
		if err := env.Kube.CoreV1().ConfigMaps(before).Delete(ctx, RootCertConfigMap, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the root recreated in "+before, published(before))
	})

	t.Run("a change that keeps the root is not written over", func(t *testing.T) {
		cm, err := cms(after).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Annotations = map[string]string{"example.com/note": "kept"}
		updated, err := env.Kube.CoreV1().ConfigMaps(after).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A write would change the resourceVersion. The repairs above take
		// milliseconds, so a second of quiet is a fair bound.
		time.Sleep(time.Second)
		now, err := cms(after).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if now.ResourceVersion != updated.ResourceVersion {
			t.Errorf("the ConfigMap was rewritten (resourceVersion %s → %s) though its root was right",
				updated.ResourceVersion, now.ResourceVersion)
		}
	})

	t.Run("a terminating namespace is left alone", func(t *testing.T) {
		gone := env.Namespace(t, "gone")
		eventually(t, "the root in "+gone, published(gone))
		if err := env.Kube.CoreV1().Namespaces().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// A bare API server runs no namespace controller, so the namespace
		// stays Terminating; deleting its ConfigMap must not be followed
		// by a create the API server would refuse, retried forever. The
		// ConfigMap goes at once, so the publisher may hear of it before
		// its namespace informer has seen the namespace's deletion: the
		// API server's refusal then ends the repair quietly too.
		if err := env.Kube.CoreV1().ConfigMaps(gone).Delete(ctx, RootCertConfigMap, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if _, err := cms(gone).Get(ctx, RootCertConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get in a terminating namespace: %v, want NotFound", err)
		}
		if strings.Contains(logs.String(), "being terminated") {
			t.Errorf("the publisher tried to write into a terminating namespace:\n%s", logs.String())
		}
	})

	if !p.HasSynced() {
		t.Error("HasSynced is false after publishing")
	}
}

func eventually(t *testing.T, what string, check func() error) {
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
		time.Sleep(20 * time.Millisecond)
	}
}
