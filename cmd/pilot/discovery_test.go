package main

import "testing"

// TestEnableProfilingFlag: pprof is off unless --enable-profiling is given
// (pkg/bootstrap tests what the flag serves).
func TestEnableProfilingFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "false"},
		{[]string{"--enable-profiling"}, "true"},
		{[]string{"--enable-profiling=false"}, "false"},
	}
	for _, tc := range cases {
		cmd := newDiscoveryCommand()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		f := cmd.Flags().Lookup("enable-profiling")
		if f == nil {
			t.Fatal("pilot discovery has no --enable-profiling flag")
		}
		if f.DefValue != "false" || f.Value.String() != tc.want {
			t.Errorf("%v: --enable-profiling = %s (default %s), want %s (default false)", tc.args, f.Value, f.DefValue, tc.want)
		}
	}
}
