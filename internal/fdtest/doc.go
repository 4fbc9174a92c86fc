// Package fdtest runs test code with the process out of file descriptors,
// to prove that accept loops survive the shortage.
package fdtest
