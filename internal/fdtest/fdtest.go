package fdtest

import (
	"errors"
	"syscall"
	"testing"
)

// Exhaust runs fn with one file descriptor left to the process, then
// frees them and restores the limit. Any accept in the process fails
// meanwhile, even with no connection waiting. The limit is the process's,
// so a test that calls it must not run in parallel with others.
func Exhaust(t testing.TB, fn func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	var fillers []int
	defer func() {
		for _, fd := range fillers {
			syscall.Close(fd)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	// A low limit keeps the fillers few.
	low := syscall.Rlimit{Cur: 1024, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := syscall.Dup(0)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, fd)
	}
	if len(fillers) == 0 {
		t.Fatal("no descriptor could be taken")
	}
	syscall.Close(fillers[len(fillers)-1])
	fillers = fillers[:len(fillers)-1]
	fn()
}
