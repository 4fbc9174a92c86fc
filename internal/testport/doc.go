// Package testport picks loopback ports for tests that must name a port
// before anything listens on it, or that leave it closed on purpose.
package testport
