package model

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStoreSourceProblems(t *testing.T) {
	s := NewStore()
	var events []ConfigKey
	s.OnChange(func(k ConfigKey) { events = append(events, k) })
	fileKey := ConfigKey{Kind: KindSourceProblems, Name: "file"}

	broken := []SourceProblem{
		{File: "b.yaml", Line: 3, Message: "yaml: did not find expected key"},
		{File: "a.yaml", Line: 9, Kind: "DestinationRule", Namespace: "ns", Name: "r", Message: "spec.x: unknown field"},
	}
	s.SetSourceProblems("file", broken)
	s.SetSourceProblems("file", slices.Clone(broken)) // the same list again: no change
	s.SetSourceProblems("other", []SourceProblem{{Message: "m"}})
	want := []SourceProblem{
		{Source: "file", File: "a.yaml", Line: 9, Kind: "DestinationRule", Namespace: "ns", Name: "r", Message: "spec.x: unknown field"},
		{Source: "file", File: "b.yaml", Line: 3, Message: "yaml: did not find expected key"},
		{Source: "other", Message: "m"},
	}
	if diff := cmp.Diff(want, s.SourceProblems()); diff != "" {
		t.Errorf("problems (-want +got)\n%s", diff)
	}
	if broken[0].Source != "" {
		t.Error("SetSourceProblems changed the caller's slice")
	}

	s.SetSourceProblems("file", nil)
	s.SetSourceProblems("file", nil)
	if diff := cmp.Diff(want[2:], s.SourceProblems()); diff != "" {
		t.Errorf("after clearing (-want +got)\n%s", diff)
	}
	wantEvents := []ConfigKey{fileKey, {Kind: KindSourceProblems, Name: "other"}, fileKey}
	if !slices.Equal(events, wantEvents) {
		t.Errorf("events %v, want %v", events, wantEvents)
	}
}
