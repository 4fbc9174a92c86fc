package main

import (
	"os"
	"testing"
)

func TestMeasurementsCostCPU(t *testing.T) {
	for _, m := range measurements {
		// A hundredth of each run is still milliseconds of work: enough for
		// getrusage, which counts CPU time in nanoseconds on Linux.
		if got := medianCPU(m.run, max(m.ops/100, 20), 3); got <= 0 {
			t.Errorf("%s: %v of CPU per operation, want more than nothing", m.name, got)
		}
	}
}

func TestPingPongClosesItsPipes(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := fds()
	pingPong(100)
	if after := fds(); after != before {
		t.Errorf("%d open file descriptors after a ping-pong, %d before", after, before)
	}
}
