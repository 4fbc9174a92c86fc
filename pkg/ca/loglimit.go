package ca

import (
	"sync"
	"time"
)

// causeLog lets a log line about a cause through once per interval, with
// the number of occurrences it stands for: a fault that fails every call
// (the CA's RBAC lacking a permission, an API server that does not answer)
// must be named, and named again while it lasts, but one line per call
// would drown it. Causes come from a small fixed set (the permissions the
// CA uses, the checks it makes), so the map stays small.
type causeLog struct {
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	causes map[string]*causeSeen
}

type causeSeen struct {
	logged time.Time // when its last line was let through
	since  int       // occurrences since then, not yet reported
}

func newCauseLog(interval time.Duration) *causeLog {
	return &causeLog{interval: interval, now: time.Now, causes: map[string]*causeSeen{}}
}

// note records an occurrence of cause. It says whether to log it now and,
// if so, how many occurrences the line stands for: this one and those kept
// quiet since the previous line.
func (l *causeLog) note(cause string) (logNow bool, occurrences int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c, ok := l.causes[cause]
	if !ok {
		c = &causeSeen{}
		l.causes[cause] = c
	}
	c.since++
	if ok && now.Sub(c.logged) < l.interval {
		return false, 0
	}
	occurrences, c.since, c.logged = c.since, 0, now
	return true, occurrences
}
