// Package pilotbin gives the tests that run pilot as a process its binary:
// the one `make test` builds once for every test package, or else one built
// once for the test process.
package pilotbin
