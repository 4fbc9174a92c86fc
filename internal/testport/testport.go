package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// A test that frees a port and expects to listen on it again later (a
// child process given the address, a server restarted on it) or to find it
// refused meanwhile used to take it from bind(":0"). That port lies in the
// kernel's ephemeral range, which also serves every outgoing connection on
// the machine: one of them could take it in between. Port picks its ports
// below that range instead, where the kernel never assigns one on its own,
// so only a program that names the same port can take it.

const lowest = 10000 // above the well-known and registered ports services use by default

var (
	mu     sync.Mutex
	issued = map[int]bool{} // never twice in one test binary
)

// Addr returns "127.0.0.1:<port>" for a port that nothing listened on when
// it was picked and that the kernel will not hand out to a bind(":0") or a
// connect().
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", Port(t))
}

// Port is Addr's port alone.
func Port(t testing.TB) string {
	t.Helper()
	hi, err := ephemeralLow()
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	if hi-lowest < 1000 {
		t.Fatalf("testport: the ephemeral range starts at %d, leaving too few ports below it", hi)
	}
	p, err := pick(lowest, hi)
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	return strconv.Itoa(p)
}

// pick returns a port of [lo, hi) not issued before and free to listen on.
func pick(lo, hi int) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			return 0, err
		}
		l.Close()
		issued[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d) in 100 tries", lo, hi)
}

// ephemeralLow is the first port of the kernel's ephemeral range; see
// ip_local_port_range in the kernel's ip-sysctl documentation.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if errors.Is(err, os.ErrNotExist) {
		return 32768, nil // the kernel's default, where /proc does not say
	}
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, errors.New("ip_local_port_range: want two ports, got " + strconv.Quote(string(b)))
	}
	return strconv.Atoi(f[0])
}
