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
// A default that depends on the environment or on other settings
// ("$POD_NAMESPACE or ...", "mesh config ..., else ...") must name the
// fallback the flag has when nothing else supplies one.
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
					checkFallback(t, name, cell, f.DefValue)
					return
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

// checkFallback checks a README default that depends on more than the
// flag against the flag's own default: the README must name it among the
// cell's alternatives. Two flags have no fixed fallback to name: the
// leader's identity (this host's name and pid, "host-pid") and the
// webhook Service (from --revision, so the flag's default is empty).
func checkFallback(t *testing.T, name, cell, def string) {
	t.Helper()
	host, _ := os.Hostname()
	switch {
	case def == "" && strings.Contains(cell, "<revision>"):
	case host != "" && strings.HasPrefix(def, host) && strings.Contains(cell, "host-pid"):
	case def != "" && (def == os.Getenv("POD_NAMESPACE") || def == os.Getenv("POD_NAME")):
		// Run in a pod: the environment supplied the default.
	case strings.Contains(cell, "`"+def+"`"):
	default:
		t.Errorf("README says the default of --%s is %q, which does not name the flag's own %q", name, cell, def)
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
