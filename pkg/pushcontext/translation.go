package pushcontext

import (
	"sync"
	"sync/atomic"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// translationProblems collects what generators had to drop while
// translating one snapshot. Generators run on many goroutines at once, and
// usually report the same few problems once per proxy, so the common case
// (already reported) is a lock-free map read.
type translationProblems struct {
	seen  sync.Map // translationKey -> struct{}
	count atomic.Int64
}

type translationKey struct {
	key    model.ConfigKey
	reason string
}

// ReportProblem records that a generator had to drop part of a config object
// while translating this snapshot. It returns true only the first time a
// (key, reason) pair is reported for this snapshot, so callers can log once
// per push rather than once per proxy. Safe for concurrent use.
func (pc *PushContext) ReportProblem(key model.ConfigKey, reason string) bool {
	k := translationKey{key: key, reason: reason}
	if _, seen := pc.translation.seen.Load(k); seen {
		return false
	}
	if _, seen := pc.translation.seen.LoadOrStore(k, struct{}{}); seen {
		return false
	}
	pc.translation.count.Add(1)
	return true
}

// ProblemCount returns how many distinct translation problems have been
// reported for this snapshot.
func (pc *PushContext) ProblemCount() int { return int(pc.translation.count.Load()) }

func (pc *PushContext) translationProblems() []Problem {
	out := []Problem{}
	pc.translation.seen.Range(func(k, _ any) bool {
		tk := k.(translationKey)
		out = append(out, Problem{Kind: tk.key.Kind.String(), Namespace: tk.key.Namespace, Name: tk.key.Name, Message: tk.reason})
		return true
	})
	return sortProblems(out)
}
