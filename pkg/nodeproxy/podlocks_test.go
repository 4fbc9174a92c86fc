package nodeproxy

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPodLocks(t *testing.T) {
	var l podLocks
	ctx := context.Background()
	unlockA, err := l.lock(ctx, "app/a")
	if err != nil {
		t.Fatal(err)
	}

	// Another pod is not held up.
	unlockB, err := l.lock(ctx, "app/b")
	if err != nil {
		t.Fatal(err)
	}
	unlockB()

	// The same pod waits for the holder, and gets its turn once released.
	got := make(chan func(), 1)
	go func() {
		unlock, err := l.lock(ctx, "app/a")
		if err != nil {
			t.Error(err)
		}
		got <- unlock
	}()
	select {
	case <-got:
		t.Fatal("a second command for app/a ran while the first held it")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case unlock := <-got:
		unlock()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting command never got its turn")
	}

	// A waiter whose deadline passes gives up, and leaves the lock usable.
	unlockA, _ = l.lock(ctx, "app/a")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(short, "app/a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting past the deadline: %v, want DeadlineExceeded", err)
	}
	unlockA()

	// Nothing is kept for pods nobody waits on.
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.locks) != 0 {
		t.Errorf("%d locks kept after every command ended", len(l.locks))
	}
}
