package controllers

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/testport"
)

// A GET refused at the TCP level is retried until the server listens; a
// write fails at once; a GET gives up when its context does, or soon when
// it has none that can end.
func TestRetryRefusedReads(t *testing.T) {
	// A port nothing listens on: connections to it are refused.
	addr := testport.Addr(t)

	cfg := &rest.Config{Host: "http://" + addr}
	RetryRefusedReads(cfg)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := client.Post("http://"+addr+"/write", "text/plain", strings.NewReader("x")); err == nil {
		t.Fatal("a refused write succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/read", nil)
	if _, err := client.Do(req); err == nil {
		t.Fatal("a refused read with an expired context succeeded")
	}

	// A read nobody can cancel gives up after a while.
	if _, err := client.Get("http://" + addr + "/read"); err == nil {
		t.Fatal("a refused read without a deadline succeeded")
	}

	// The server comes up while a read waits for it.
	var served atomic.Int32
	done := make(chan error, 1)
	waitCtx, waitCancel := context.WithCancel(context.Background())
	defer waitCancel()
	go func() {
		req, _ := http.NewRequestWithContext(waitCtx, http.MethodGet, "http://"+addr+"/read", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // let the read be refused at least once
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the read failed although the server came up: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read still waits 30s after the server came up")
	}
	if served.Load() != 1 {
		t.Fatalf("the server answered %d requests, want the one read", served.Load())
	}
}
