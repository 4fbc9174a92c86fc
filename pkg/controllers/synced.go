package controllers

import "sync"

// syncedSignal marks a source's first complete sync. The control plane's
// first push context waits on it, and so does every proxy's first config
// after a restart: a waiter that polled would add up to its period to each
// cold start, so waiters block on done instead. The zero value is ready
// for use.
type syncedSignal struct {
	init, set sync.Once
	ch        chan struct{}
}

// done is closed once mark has been called.
func (s *syncedSignal) done() <-chan struct{} { return s.channel() }

// mark records the sync; later calls do nothing.
func (s *syncedSignal) mark() {
	ch := s.channel()
	s.set.Do(func() { close(ch) })
}

func (s *syncedSignal) channel() chan struct{} {
	s.init.Do(func() { s.ch = make(chan struct{}) })
	return s.ch
}

func (s *syncedSignal) isMarked() bool {
	select {
	case <-s.done():
		return true
	default:
		return false
	}
}
