// Package dirwatch follows the files of a directory, such as a mounted
// ConfigMap, and calls back after each change.
package dirwatch
