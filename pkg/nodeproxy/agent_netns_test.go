package nodeproxy

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
)

// TestStaleDelKeepsCurrentSandbox recreates a pod's sandbox as a runtime
// does when the old one dies: ADD for the new sandbox, in a new namespace,
// and only then (the kubelet collecting the dead one) a DEL for the old
// container, with its namespace still there or already gone. That DEL is
// about a sandbox the pod no longer runs in: the current capture, its
// listeners and the annotation must stay, or the pod's traffic is sent to
// a :15001 nobody listens on and peers stop tunnelling to it. A DEL of the
// current sandbox still releases everything.
func TestStaleDelKeepsCurrentSandbox(t *testing.T) {
	for _, tc := range []struct {
		name string
		// del is the DEL that follows, given the old and new namespaces.
		del func(old, cur string) agentapi.Request
		// released: the DEL is the current sandbox's, so everything goes.
		released bool
		// oldRules: the capture is still in the old namespace afterwards.
		oldRules bool
	}{
		{"old sandbox, namespace gone", func(_, _ string) agentapi.Request {
			return agentapi.Request{ContainerID: "sandbox-1"}
		}, false, true},
		{"old sandbox, namespace still there", func(old, _ string) agentapi.Request {
			return agentapi.Request{ContainerID: "sandbox-1", Netns: old}
		}, false, false},
		{"old sandbox, no container ID", func(old, _ string) agentapi.Request {
			return agentapi.Request{Netns: old}
		}, false, false},
		{"current sandbox", func(_, cur string) agentapi.Request {
			return agentapi.Request{ContainerID: "sandbox-2", Netns: cur}
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := netnstest.Pair(t)
			p, kube := agentProxy(t)
			ctx := context.Background()
			add := func(id string, ns netnstest.Namespace) {
				t.Helper()
				if err := p.HandleCNI(ctx, agentapi.Request{Command: agentapi.CommandAdd, PodNamespace: "app",
					PodName: "a", PodUID: "uid-a", ContainerID: id, Netns: ns.Path, IfName: "eth0",
					PodIPs: []netip.Addr{ns.IP}}); err != nil {
					t.Fatalf("ADD %s: %v", id, err)
				}
			}
			add("sandbox-1", old)
			add("sandbox-2", cur)

			del := tc.del(old.Path, cur.Path)
			del.Command, del.PodNamespace, del.PodName, del.IfName = agentapi.CommandDel, "app", "a", "eth0"
			if err := p.HandleCNI(ctx, del); err != nil {
				t.Fatalf("DEL: %v", err)
			}

			check := p.HandleCNI(ctx, agentapi.Request{Command: agentapi.CommandCheck, PodNamespace: "app",
				PodName: "a", ContainerID: "sandbox-2", Netns: cur.Path, IfName: "eth0"})
			pod, err := kube.CoreV1().Pods("app").Get(ctx, "a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			annotated := pod.Annotations[RedirectionAnnotation] == "enabled"
			rules, err := capture.NFTables.Installed(cur.Path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.released {
				if check == nil || annotated || rules {
					t.Errorf("after the current sandbox's DEL: CHECK %v, annotated %v, rules %v; want all gone", check, annotated, rules)
				}
			} else if check != nil || !annotated || !rules {
				t.Errorf("after an old sandbox's DEL: CHECK %v, annotated %v, rules %v; want the current capture whole", check, annotated, rules)
			}
			if got, _ := capture.NFTables.Installed(old.Path); got != tc.oldRules {
				t.Errorf("capture in the old namespace: %v, want %v", got, tc.oldRules)
			}
		})
	}
}

// agentProxy is a node proxy on node-1 whose agent is called directly,
// with the Pod app/a in a fake API server; WDS and the CA are never
// reached.
func agentProxy(t *testing.T) (*Proxy, *fake.Clientset) {
	return agentProxyWith(t, func(k kubernetes.Interface) kubernetes.Interface { return k })
}

// agentProxyWith is agentProxy whose agent reaches the fake API server
// through wrap.
func agentProxyWith(t *testing.T, wrap func(kubernetes.Interface) kubernetes.Interface) (*Proxy, *fake.Clientset) {
	t.Helper()
	kube := fake.NewSimpleClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "a", UID: "uid-a"},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "a"},
	})
	p, err := New(Options{Node: "node-1", Conn: noConn{}, Kube: wrap(kube), CNISocket: "unused",
		PodNetns: func(string, string) (string, error) { return "", io.EOF },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, lw := range p.local {
			lw.close()
		}
	})
	return p, kube
}

// TestSandboxChangeDoesNotInterleave runs a new sandbox's ADD while the
// DEL of the pod's current sandbox is in flight, as a runtime may. The DEL
// is held just as it removes the annotation; if the ADD ran meanwhile, the
// removal would land after the ADD set it, and the pod, captured in its new
// sandbox, would lose the annotation that makes peers tunnel to it.
func TestSandboxChangeDoesNotInterleave(t *testing.T) {
	old, cur := netnstest.Pair(t)
	removing, release := make(chan struct{}), make(chan struct{})
	p, kube := agentProxyWith(t, func(k kubernetes.Interface) kubernetes.Interface {
		return pausingKube{Interface: k, pause: func(patch []byte) {
			if strings.Contains(string(patch), "null") {
				close(removing)
				<-release
			}
		}}
	})
	ctx := context.Background()
	add := func(id string, ns netnstest.Namespace) error {
		return p.HandleCNI(ctx, agentapi.Request{Command: agentapi.CommandAdd, PodNamespace: "app",
			PodName: "a", PodUID: "uid-a", ContainerID: id, Netns: ns.Path, IfName: "eth0",
			PodIPs: []netip.Addr{ns.IP}})
	}
	if err := add("sandbox-1", old); err != nil {
		t.Fatal(err)
	}

	delDone := make(chan error, 1)
	go func() {
		delDone <- p.HandleCNI(ctx, agentapi.Request{Command: agentapi.CommandDel, PodNamespace: "app",
			PodName: "a", ContainerID: "sandbox-1", Netns: old.Path, IfName: "eth0"})
	}()
	<-removing
	addDone := make(chan error, 1)
	go func() { addDone <- add("sandbox-2", cur) }()
	var addErr error
	select {
	case addErr = <-addDone:
		t.Errorf("the new sandbox's ADD ran while the old one's DEL was in flight")
		close(release)
	case <-time.After(time.Second):
		close(release)
		select {
		case addErr = <-addDone:
		case <-time.After(30 * time.Second):
			t.Fatal("the ADD never ran")
		}
	}
	if err := <-delDone; err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if addErr != nil {
		t.Fatalf("ADD: %v", addErr)
	}

	pod, err := kube.CoreV1().Pods("app").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations[RedirectionAnnotation] != "enabled" {
		t.Errorf("the pod captured in its new sandbox has annotations %v", pod.Annotations)
	}
	if err := p.HandleCNI(ctx, agentapi.Request{Command: agentapi.CommandCheck, PodNamespace: "app",
		PodName: "a", ContainerID: "sandbox-2", Netns: cur.Path, IfName: "eth0"}); err != nil {
		t.Errorf("CHECK of the new sandbox: %v", err)
	}
}

// pausingKube calls pause with each Pod patch before it reaches the API
// server. It wraps the client rather than adding a reactor to the fake,
// whose reactors run under one lock that would hold every other call too.
type pausingKube struct {
	kubernetes.Interface
	pause func(patch []byte)
}

func (k pausingKube) CoreV1() corev1client.CoreV1Interface {
	return pausingCore{CoreV1Interface: k.Interface.CoreV1(), pause: k.pause}
}

type pausingCore struct {
	corev1client.CoreV1Interface
	pause func(patch []byte)
}

func (c pausingCore) Pods(namespace string) corev1client.PodInterface {
	return pausingPods{PodInterface: c.CoreV1Interface.Pods(namespace), pause: c.pause}
}

type pausingPods struct {
	corev1client.PodInterface
	pause func(patch []byte)
}

func (p pausingPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Pod, error) {
	p.pause(data)
	return p.PodInterface.Patch(ctx, name, pt, data, opts, sub...)
}
