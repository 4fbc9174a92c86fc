// Package exepages hands back to the kernel the pages of the running
// executable that start-up read and serving does not.
package exepages
