// Package rawio hands out the xDS server's accepted TCP connections with
// reads and writes that go to the kernel as raw system calls, outside the
// Go scheduler's system-call bookkeeping.
//
// Go's runtime treats every read and write on a socket as a call that may
// block: it marks the goroutine's processor as in a system call, and when
// the call lasts longer than one tick of its monitor thread (sysmon, 20 µs)
// while other goroutines wait, it hands the processor to another thread
// and puts the monitor back on 20 µs sleeps. The runtime's sockets are
// non-blocking, so neither call ever waits: a full socket buffer returns
// EAGAIN, and the goroutine parks on the network poller as before. But a
// 64 KiB write over loopback does take tens of microseconds. In a connect
// storm (50 sidecars, megabytes each) skipping the handoffs took 0.05 s off
// the control plane's 0.38 s of CPU, and half of its context switches
// (docs/performance.md, "Raw socket I/O").
//
// Under the race detector the listener hands out plain connections: the
// syscall package tells the detector that data written to a descriptor
// happens before its reading, which raw calls would hide, and tests whose
// clients share the process would see races that are not there.
package rawio
