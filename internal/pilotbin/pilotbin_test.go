package pilotbin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fatalRecorder is a testing.TB whose Fatalf ends only the function under
// test, so the test can read what it said.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func pathOf(tb *fatalRecorder) (got string) {
	defer func() {
		if p := recover(); p != nil && p != tb {
			panic(p)
		}
	}()
	return Path(tb)
}

func TestPathUsesTheBinaryNamedByEnv(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pilot")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "absent")
	cases := []struct {
		name, env, want, fatal string
	}{
		{name: "present", env: bin, want: bin},
		{name: "missing", env: missing, fatal: Env + "=" + missing + ": stat " + missing + ": no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			rec := &fatalRecorder{TB: t}
			if got := pathOf(rec); got != tc.want || rec.msg != tc.fatal {
				t.Errorf("Path = %q, fatal %q; want %q, fatal %q", got, rec.msg, tc.want, tc.fatal)
			}
			if dir != "" {
				t.Errorf("Path built a binary into %s although %s names one", dir, Env)
			}
		})
	}
}
