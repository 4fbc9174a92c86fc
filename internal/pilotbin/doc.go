// Package pilotbin gives the tests that run pilot as a process its binary:
// the one `make test` builds once for every test package, or else one built
// once for the test process; and what such a test reads of the process it
// started.
package pilotbin
