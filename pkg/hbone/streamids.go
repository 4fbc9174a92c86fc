package hbone

import "golang.org/x/net/http2"

// The stream identifiers a client may use (RFC 9113 §5.1.1), tracked by
// the highest one it has opened: lastID.

// openIDLocked records id as the stream a HEADERS frame opens, whatever
// becomes of that stream: served, refused, or reset as malformed. A stream
// ID is used once, and the first use of one closes every lower idle stream
// of the client's, so a new stream's ID must be odd (the client's) and
// above every one used before; any other is a connection error
// PROTOCOL_ERROR (§5.1.1). Were a refused HEADERS' ID not recorded, the
// client could open its stream again. Call with c.mu held.
func (c *h2conn) openIDLocked(id uint32) error {
	if id%2 == 0 || id <= c.lastID {
		return connErr(http2.ErrCodeProtocol)
	}
	c.lastID = id
	return nil
}

// idleLocked reports whether stream id is idle, never opened (RFC 9113
// §5.1): above every ID the client has used, or even, as the node opens
// (pushes) no streams of its own. Only HEADERS and PRIORITY may come on
// an idle stream; any other frame is a connection error PROTOCOL_ERROR.
// A stream at or below lastID that is not open is closed instead, and
// frames on it are answered or ignored as §5.1 says for that state.
// Call with c.mu held.
func (c *h2conn) idleLocked(id uint32) bool {
	return id%2 == 0 || id > c.lastID
}
