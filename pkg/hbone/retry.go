package hbone

import (
	"errors"

	"golang.org/x/net/http2"
)

// maxRetries is how many times at most Dial sends a CONNECT again that
// the server did not process.
const maxRetries = 2

// goAwayUnprocessed is the text of the error with which net/http's HTTP/2
// client ends a stream that a GOAWAY left unprocessed, its ID above the
// GOAWAY's last stream ID. The error value is unexported, so its text is
// all there is to tell it by; TestDialerRetriesUnprocessedConnect notices
// if it changes.
const goAwayUnprocessed = "http2: Transport received Server's graceful shutdown GOAWAY"

// unprocessed reports whether err says that the server ended a stream
// before doing anything with it, so that it may be sent again (RFC 9113
// §8.7): RST_STREAM with REFUSED_STREAM, or a GOAWAY whose last stream ID
// is below it. Any other error, a reset with another code or a connection
// lost, leaves open whether the server acted on it (dialled the
// destination, say). net/http's HTTP/2 stream errors convert to x/net's
// with errors.As; the GOAWAY error is told by its text, at whatever depth
// of wrapping it comes (a url.Error, a caller's %w).
func unprocessed(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == goAwayUnprocessed {
			return true
		}
	}
	return false
}
