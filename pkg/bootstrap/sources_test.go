package bootstrap

import (
	"context"
	"testing"
	"time"
)

// signalSource is a source whose sync the test decides.
type signalSource struct{ synced chan struct{} }

func (signalSource) Name() string              { return "signal" }
func (signalSource) Run(context.Context) error { return nil }
func (s signalSource) Synced() <-chan struct{} { return s.synced }
func (s signalSource) HasSynced() bool {
	select {
	case <-s.synced:
		return true
	default:
		return false
	}
}

func TestWaitForSourcesWaitsForEverySource(t *testing.T) {
	a, b := signalSource{make(chan struct{})}, signalSource{make(chan struct{})}
	s := &Server{sources: []source{a, b}}
	returned := make(chan bool, 1)
	go func() { returned <- s.waitForSources(context.Background()) }()

	close(b.synced) // the later source first: the wait must not stop at it
	select {
	case <-returned:
		t.Fatal("waitForSources returned while a source had not synced")
	case <-time.After(100 * time.Millisecond):
	}
	close(a.synced)
	select {
	case ok := <-returned:
		if !ok {
			t.Fatal("waitForSources reported a cancelled wait after every source synced")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitForSources did not return after every source synced")
	}
}

func TestWaitForSourcesEndsWithItsContext(t *testing.T) {
	s := &Server{sources: []source{signalSource{make(chan struct{})}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.waitForSources(ctx) {
		t.Fatal("waitForSources reported every source synced although none had")
	}
}
