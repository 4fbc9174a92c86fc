package xdstest

import (
	"context"
	"sync"
)

// streamModel is the client a model keeps across its streams: told of each
// new stream and of its loss, it handles what the stream brings. adsClient
// calls it with the client's mutex held.
type streamModel interface {
	connect(tr transport)
	disconnect()
	current(tr transport) bool
	handle(resp *response)
	fail(err error)
}

// adsClient runs a model client's ADS streams: one at a time, on the same
// connection, each read by a loop of its own, closed by Disconnect and
// opened again by Reconnect.
type adsClient struct {
	open  func(ctx context.Context) (transport, error)
	model streamModel
	mu    *sync.Mutex // the client's; guards model

	// lifecycle serializes Disconnect, Reconnect and Close, which own
	// stream and closed.
	lifecycle sync.Mutex
	stream    *adsStream // nil while disconnected
	closed    bool
}

// adsStream is one ADS stream of the client and its receive loop.
type adsStream struct {
	tr     transport
	cancel context.CancelFunc
	done   chan struct{} // closed when the receive loop has ended
}

// connect opens a stream, sends its first requests and starts receiving.
// The caller holds lifecycle, or owns the client still being built.
func (a *adsClient) connect() error {
	ctx, cancel := context.WithCancel(context.Background())
	tr, err := a.open(ctx)
	if err != nil {
		cancel()
		return err
	}
	s := &adsStream{tr: tr, cancel: cancel, done: make(chan struct{})}
	a.stream = s
	a.mu.Lock()
	a.model.connect(tr)
	a.mu.Unlock()
	go a.receive(s)
	return nil
}

// closeStream closes the current stream, if any, and waits for its receive
// loop to end. The caller holds lifecycle.
func (a *adsClient) closeStream() {
	s := a.stream
	if s == nil {
		return
	}
	a.stream = nil
	a.mu.Lock()
	a.model.disconnect()
	a.mu.Unlock()
	s.cancel()
	<-s.done
}

func (a *adsClient) receive(s *adsStream) {
	defer close(s.done)
	for {
		resp, err := s.tr.recv()
		a.mu.Lock()
		if !a.model.current(s.tr) {
			// Closed by disconnect: what the stream still delivers is
			// lost, as it is to a client once its stream is reset.
			a.mu.Unlock()
			return
		}
		if err != nil {
			a.model.fail(err)
			a.mu.Unlock()
			return
		}
		a.model.handle(resp)
		a.mu.Unlock()
	}
}

// disconnect closes the client's stream, as a broken connection to the
// management server does, and leaves it closed until reconnect. What the
// model does meanwhile is its own (see EnvoyClient.Disconnect).
func (a *adsClient) disconnect() {
	a.lifecycle.Lock()
	defer a.lifecycle.Unlock()
	a.closeStream()
}

// reconnect closes the client's stream, if it has one, and opens a new one
// on the same connection; a closed client stays closed.
func (a *adsClient) reconnect() error {
	a.lifecycle.Lock()
	defer a.lifecycle.Unlock()
	if a.closed {
		return nil
	}
	a.closeStream()
	return a.connect()
}

// close ends the stream for good; the first call then runs more, with
// lifecycle still held.
func (a *adsClient) close(more func()) {
	a.lifecycle.Lock()
	defer a.lifecycle.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	a.closeStream()
	if more != nil {
		more()
	}
}
