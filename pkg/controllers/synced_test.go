package controllers

import "testing"

func TestSyncedSignal(t *testing.T) {
	var s syncedSignal // the zero value, as a source holds it
	if s.isMarked() {
		t.Fatal("a new signal reports a sync")
	}
	done := s.done()
	select {
	case <-done:
		t.Fatal("done is closed before mark")
	default:
	}
	s.mark()
	s.mark() // a second sync (a restarted Run) must not panic on a closed channel
	select {
	case <-done: // the channel handed out before mark is the one closed
	default:
		t.Fatal("done is still open after mark")
	}
	if !s.isMarked() {
		t.Fatal("isMarked is false after mark")
	}
}
