// Package testlog holds what tests need to read a component's log while its
// goroutines still write to it.
package testlog
