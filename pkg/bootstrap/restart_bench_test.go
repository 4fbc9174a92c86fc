package bootstrap

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// BenchmarkRestartPopulated is a control plane restarting on a populated
// cluster, the standard scenario's objects: 5,000 Services in 50
// namespaces, each with an EndpointSlice of 10 ready endpoints, already in
// the API server. One op runs from New until /ready answers 200 (every
// source synced, the first push context built), and stops it again.
func BenchmarkRestartPopulated(b *testing.B) {
	env := kubetest.StartAtScale(b)
	populate(b, env.Kube, 5000, 10)
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	writeKubeconfig(b, env.Config, kubeconfig)

	b.ResetTimer()
	for b.Loop() {
		o := localOptions(b)
		o.Kubeconfig = kubeconfig
		o.SecureXDSAddr, o.Webhook.Addr, o.MonitoringAddr = "", "", ""
		o.LeaderElection.Enabled = false
		srv, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		waitReady(b, "http://"+srv.HTTPAddr().String()+"/ready")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func waitReady(b *testing.B, url string) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("not ready within 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// populate creates services Services (in 50 namespaces), each with one
// EndpointSlice of endpoints ready addresses, through the API.
func populate(b *testing.B, kube kubernetes.Interface, services, endpoints int) {
	ctx := context.Background()
	for n := range 50 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%d", n)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				if err := createService(ctx, kube, i, endpoints); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range services {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func createService(ctx context.Context, kube kubernetes.Interface, i, endpoints int) error {
	ns, name := fmt.Sprintf("scale-%d", i%50), fmt.Sprintf("svc-%d", i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	port, portName, ready := int32(8080), "http", true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for e := range endpoints {
		addr := fmt.Sprintf("172.%d.%d.%d", 16+i/4096, (i/16)%256, (i%16)*16+e)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	_, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	return err
}
