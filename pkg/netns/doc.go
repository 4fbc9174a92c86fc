// Package netns runs code inside a Linux network namespace. It is the only
// package in meshpilot that calls setns(2).
//
// setns changes the namespace of one OS thread, not of a process or a
// goroutine, so every entry here runs on a fresh goroutine locked to its
// thread, and returns that thread to the caller's namespace before
// unlocking it. If the thread cannot go back, it stays locked and its
// goroutine exits, which makes the Go runtime terminate the thread instead
// of scheduling other goroutines on it in the wrong namespace.
//
// Sockets keep the namespace they were created in, so a listener or a
// connection opened here goes on working after the thread has returned.
package netns
