package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/version"
)

// TestRootCommand: the version is printed the same by the subcommand and the
// flag, and a mistyped flag or command tells the user where the help is.
func TestRootCommand(t *testing.T) {
	saved := version.Version
	version.Version = "v0.0.0-roottest"
	t.Cleanup(func() { version.Version = saved })

	cases := []struct {
		name    string
		args    []string
		wantOut string // the whole of stdout
		wantErr string // what the error or stderr must say; "" for success
	}{
		{"version subcommand", []string{"version"}, "v0.0.0-roottest\n", ""},
		{"version flag", []string{"--version"}, "v0.0.0-roottest\n", ""},
		{"unknown root flag", []string{"--verison"}, "", "Run 'pilot --help' for usage."},
		{"unknown discovery flag", []string{"discovery", "--xds-adr", ":1"}, "", "Run 'pilot discovery --help' for usage."},
		{"unknown command", []string{"discovry"}, "", "Run 'pilot --help' for usage."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCommand()
			var out, errOut bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errOut)
			root.SetArgs(tc.args)
			err := root.Execute()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("pilot %v: %v", tc.args, err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("pilot %v succeeded; want an error saying %q", tc.args, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error()+"\n"+errOut.String(), tc.wantErr):
				t.Errorf("pilot %v: error %q, stderr %q; want either to say %q", tc.args, err, errOut.String(), tc.wantErr)
			}
			if got := out.String(); got != tc.wantOut {
				t.Errorf("pilot %v printed %q; want %q", tc.args, got, tc.wantOut)
			}
		})
	}
}
