package model

import (
	"cmp"
	"slices"
)

// SourceProblem is input that a source could not turn into store objects:
// a config file that does not parse, or one object of it that is invalid.
// Each source reports the whole list of its current problems at once
// (Store.SetSourceProblems), so the list always says what is wrong now.
type SourceProblem struct {
	// Source is the source's name ("file").
	Source string `json:"source"`
	// File and Line say where the problem is, for the file source; Line
	// counts from 1 at the start of the file.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Kind, Namespace and Name identify the object rejected; they are empty
	// when the problem is not one object's (a file that does not parse).
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Message   string `json:"message"`
}

// compareSourceProblems orders problems by source, file and line.
func compareSourceProblems(a, b SourceProblem) int {
	return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Message, b.Message))
}

func (s *memStore) SetSourceProblems(source string, problems []SourceProblem) {
	problems = slices.Clone(problems)
	for i := range problems {
		problems[i].Source = source
	}
	slices.SortFunc(problems, compareSourceProblems)
	s.write(ConfigKey{Kind: KindSourceProblems, Name: source}, func() bool {
		old := s.sourceProblems[source]
		if slices.Equal(old, problems) {
			return false
		}
		if len(problems) == 0 {
			delete(s.sourceProblems, source)
		} else {
			s.sourceProblems[source] = problems
		}
		return true
	})
}

func (s *memStore) SourceProblems() []SourceProblem {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []SourceProblem
	for _, list := range s.sourceProblems {
		out = append(out, list...)
	}
	slices.SortFunc(out, compareSourceProblems)
	return out
}
