package pushcontext

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestReportProblem(t *testing.T) {
	ruleA := key(model.KindDestinationRule, "ns", "a")
	ruleB := key(model.KindDestinationRule, "ns", "b")
	store := model.NewStore()
	pc := Build(store, testOpts, nil, nil)
	reports := []struct {
		key    model.ConfigKey
		reason string
		first  bool
	}{
		{ruleB, "tls MUTUAL without credentialName", true},
		{ruleB, "tls MUTUAL without credentialName", false},
		{ruleA, "tls MUTUAL without credentialName", true},
		{ruleB, "consistentHash without a key", true},
		{ruleA, "tls MUTUAL without credentialName", false},
	}
	for i, r := range reports {
		if got := pc.ReportProblem(r.key, r.reason); got != r.first {
			t.Errorf("report %d (%s, %q) = %v, want %v", i, r.key, r.reason, got, r.first)
		}
	}
	if got := pc.ProblemCount(); got != 3 {
		t.Errorf("ProblemCount = %d, want 3", got)
	}
	want := []Problem{
		{Kind: "DestinationRule", Namespace: "ns", Name: "a", Message: "tls MUTUAL without credentialName"},
		{Kind: "DestinationRule", Namespace: "ns", Name: "b", Message: "consistentHash without a key"},
		{Kind: "DestinationRule", Namespace: "ns", Name: "b", Message: "tls MUTUAL without credentialName"},
	}
	if diff := cmp.Diff(want, pc.Summary().TranslationProblems); diff != "" {
		t.Errorf("translationProblems (-want +got):\n%s", diff)
	}

	// Each snapshot logs once: the next one, even when it reuses every
	// index, starts afresh.
	next := Build(store, testOpts, pc, pushRequest(key(model.KindNamespace, "", "ns")))
	if next.ProblemCount() != 0 || len(next.Summary().TranslationProblems) != 0 {
		t.Errorf("a new snapshot inherited problems: %d", next.ProblemCount())
	}
	if !next.ReportProblem(ruleA, "tls MUTUAL without credentialName") {
		t.Error("a new snapshot must report a known problem once again")
	}
}

// TestReportProblemConcurrently is meant for -race: many generators report
// the same problems at once; each (key, reason) is first exactly once.
func TestReportProblemConcurrently(t *testing.T) {
	pc := Build(model.NewStore(), testOpts, nil, nil)
	const goroutines, problems = 8, 50
	var firsts atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range problems {
				if pc.ReportProblem(key(model.KindDestinationRule, "ns", "r"+strconv.Itoa(i%10)), "reason "+strconv.Itoa(i)) {
					firsts.Add(1)
				}
				_ = pc.ProblemCount()
			}
		})
	}
	wg.Wait()
	if got := firsts.Load(); got != problems {
		t.Errorf("%d reports were first, want %d", got, problems)
	}
	if got := pc.ProblemCount(); got != problems {
		t.Errorf("ProblemCount = %d, want %d", got, problems)
	}
}
