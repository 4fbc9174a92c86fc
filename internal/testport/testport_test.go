package testport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	low, err := ephemeralLow()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 50 {
		p := Port(t)
		n, err := strconv.Atoi(p)
		if err != nil || n < lowest || n >= low {
			t.Fatalf("port %q: want a number in [%d, %d)", p, lowest, low)
		}
		if seen[p] {
			t.Fatalf("port %s issued twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("listen on the issued port %s: %v", p, err)
		}
		l.Close()
	}
}

func TestPickSkipsPortsInUseAndIssued(t *testing.T) {
	// A held port whose neighbour is free: the kernel hands out :0 ports
	// with gaps, and a taken neighbour only means another try.
	p := 0
	for try := 0; p == 0; try++ {
		if try == 20 {
			t.Fatal("no held port with a free neighbour in 20 tries")
		}
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		n := held.Addr().(*net.TCPAddr).Port
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(n+1)); err == nil {
			l.Close()
			p = n
		}
	}

	got, err := pick(p, p+2)
	if err != nil || got != p+1 {
		t.Fatalf("pick from {%d in use, %d free} = %d, %v; want %d", p, p+1, got, err, p+1)
	}
	if got, err := pick(p, p+2); err == nil {
		t.Fatalf("pick again from {%d in use, %d issued} = %d; want an error", p, p+1, got)
	}
}
