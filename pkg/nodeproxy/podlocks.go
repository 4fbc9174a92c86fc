package nodeproxy

import (
	"context"
	"sync"
)

// podLocks serialises the CNI commands of each pod. The runtime may run a
// new sandbox's ADD while it still runs the DEL of the old one; their steps
// (rules, listeners, the annotation) must not interleave, or the DEL's
// removal of the annotation can land after the ADD set it, and peers stop
// tunnelling to a pod that is captured.
type podLocks struct {
	mu    sync.Mutex
	locks map[string]*podLock
}

// podLock is one pod's: a token channel, so that a waiter can give up when
// its request's deadline passes, and a count of its holders and waiters,
// so that it is dropped when nobody needs it.
type podLock struct {
	token chan struct{}
	users int
}

// lock waits for key's turn; the returned function releases it. It fails
// only when ctx ends first.
func (l *podLocks) lock(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*podLock{}
	}
	pl := l.locks[key]
	if pl == nil {
		pl = &podLock{token: make(chan struct{}, 1)}
		l.locks[key] = pl
	}
	pl.users++
	l.mu.Unlock()

	select {
	case pl.token <- struct{}{}:
		return func() {
			<-pl.token
			l.done(key, pl)
		}, nil
	case <-ctx.Done():
		l.done(key, pl)
		return nil, ctx.Err()
	}
}

func (l *podLocks) done(key string, pl *podLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pl.users--; pl.users == 0 {
		delete(l.locks, key)
	}
}
