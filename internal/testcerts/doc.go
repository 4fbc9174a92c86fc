// Package testcerts makes throwaway self-signed certificates for tests;
// nothing it makes is ever written to the repository.
package testcerts
