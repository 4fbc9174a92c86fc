package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeFlagDefaults: the README's table of `pilot discovery` flags is
// what operators read to size and configure a deployment; each default it
// states must be the flag's default (what --help prints and what runs).
// Defaults that depend on the environment or on other settings ("$POD_NAME
// or ...", "mesh config ..., else ...") are left out.
func TestReadmeFlagDefaults(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| ([^|]*) \\|")
	single := regexp.MustCompile("^`([^`$]*)`(?: \\([^)]*\\))?$")
	flags := newDiscoveryCommand().Flags()
	checked := 0
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		name, cell := m[1], strings.TrimSpace(m[2])
		t.Run(name, func(t *testing.T) {
			f := flags.Lookup(name)
			if f == nil {
				t.Fatalf("the README lists --%s, which pilot discovery does not have", name)
			}
			want := ""
			if cell != "" {
				sm := single.FindStringSubmatch(cell)
				if sm == nil {
					t.Skipf("default %q depends on more than the flag", cell)
				}
				want = sm[1]
			}
			checked++
			if !sameDefault(f.DefValue, want) {
				t.Errorf("README says the default of --%s is %q; the flag's is %q", name, want, f.DefValue)
			}
		})
	}
	// And the other way: every flag is in the table.
	listed := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(flags.FlagUsages(), -1)
	if len(listed) < 20 {
		t.Errorf("found %d flags in pilot discovery's usage; did its format change?", len(listed))
	}
	for _, m := range listed {
		if !strings.Contains(string(readme), "| `--"+m[1]+"` |") {
			t.Errorf("--%s is not in the README's table of flags", m[1])
		}
	}
	if checked < 20 {
		t.Errorf("checked %d flags of the README's table; did its format change?", checked)
	}
}

// sameDefault compares a flag's DefValue with the README's spelling:
// durations by value, lists and maps without pflag's brackets.
func sameDefault(def, readme string) bool {
	if def == readme {
		return true
	}
	if d1, err1 := time.ParseDuration(def); err1 == nil {
		d2, err2 := time.ParseDuration(readme)
		return err2 == nil && d1 == d2
	}
	return strings.TrimSuffix(strings.TrimPrefix(def, "["), "]") == readme
}
