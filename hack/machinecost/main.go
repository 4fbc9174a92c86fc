// Command machinecost measures what the kernel charges a Go program on this
// machine for the operations a control plane under load performs thousands
// of times a second: entering a system call, a short sleep (the Go
// runtime's sysmon thread sleeps 20 µs at a time while the program is
// busy), a context switch between two threads, and the first touch of a
// fresh page. In a virtual machine each can cost ten or more times what it
// does on bare metal, which moves where a load test's CPU time goes;
// docs/performance.md reads its figures next to the load tool's.
//
// Each figure is CPU time (user and system, from getrusage) per operation,
// the median of -runs runs.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"
)

// measurement is one kind of operation, timed ops at a time.
type measurement struct {
	name string
	ops  int
	run  func(ops int)
}

var measurements = []measurement{
	{"system call (getpid)", 200_000, syscalls},
	{"20 µs sleep (nanosleep)", 2_000, sleeps},
	{"thread ping-pong round (2 switches, 4 system calls)", 10_000, pingPong},
	{"first touch of a 4 KiB page", 16_384, firstTouch},
}

func main() {
	runs := flag.Int("runs", 5, "runs of each measurement; the median is printed")
	flag.Parse()
	// One thread does the work; the ping-pong adds a second of its own.
	runtime.LockOSThread()
	for _, m := range measurements {
		fmt.Printf("%-52s %8.2f µs of CPU\n", m.name, float64(medianCPU(m.run, m.ops, *runs).Nanoseconds())/1e3)
	}
}

// medianCPU is the median over runs of the CPU time run(ops) takes per op.
func medianCPU(run func(ops int), ops, runs int) time.Duration {
	per := make([]time.Duration, runs)
	for i := range per {
		before := cpuTime()
		run(ops)
		per[i] = (cpuTime() - before) / time.Duration(ops)
	}
	slices.Sort(per)
	return per[len(per)/2]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "getrusage:", err)
		os.Exit(1)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func syscalls(ops int) {
	for range ops {
		syscall.Getpid()
	}
}

func sleeps(ops int) {
	ts := syscall.Timespec{Nsec: 20_000}
	for range ops {
		_ = syscall.Nanosleep(&ts, nil)
	}
}

// pingPong passes a byte to a second thread and back over two pipes: each
// round puts each thread to sleep once and wakes it once.
func pingPong(ops int) {
	var there, back [2]int
	if err := syscall.Pipe(there[:]); err != nil {
		panic(err)
	}
	if err := syscall.Pipe(back[:]); err != nil {
		panic(err)
	}
	defer func() {
		for _, fd := range []int{there[0], there[1], back[0], back[1]} {
			syscall.Close(fd)
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b := make([]byte, 1)
		for range ops {
			mustIO(syscall.Read(there[0], b))
			mustIO(syscall.Write(back[1], b))
		}
	}()
	b := make([]byte, 1)
	for range ops {
		mustIO(syscall.Write(there[1], b))
		mustIO(syscall.Read(back[0], b))
	}
	<-done
}

func mustIO(n int, err error) {
	if n != 1 || err != nil {
		panic(fmt.Sprintf("pipe: %d bytes, %v", n, err))
	}
}

// firstTouch maps fresh anonymous memory, without transparent huge pages,
// and writes one byte per page: each write is a page fault that the kernel
// answers with a zeroed page, as the Go heap's growth is.
func firstTouch(pages int) {
	const page = 4096
	m, err := syscall.Mmap(-1, 0, pages*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	defer syscall.Munmap(m)
	if err := syscall.Madvise(m, syscall.MADV_NOHUGEPAGE); err != nil {
		panic(err)
	}
	for i := 0; i < len(m); i += page {
		m[i] = 1
	}
}
