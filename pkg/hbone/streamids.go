package hbone

import (
	"slices"

	"golang.org/x/net/http2"
)

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

// A stream the node resets while the client may still be sending on it is
// closed for the node at once, but for the client only once our
// RST_STREAM reaches it: whatever it sent before then, HEADERS included,
// the node must decode and discard (RFC 9113 §5.1, "closed"). Forgotten,
// such a stream would look like any other ID at or below lastID, where
// HEADERS mean a reused stream ID and so a connection error (§5.1.1). The
// node therefore keeps the IDs of its latest such resets, in a ring so a
// peer cannot grow it: the client has at most MaxConcurrentStreams streams
// open, so at most that many of our resets can be crossing its frames at
// once; twice that leaves room for a round trip's turnover. HEADERS that
// come after more resets than that are taken for a reused ID.
type resetIDs struct {
	ids  []uint32 // allocated at the first reset
	next int      // where the next ID goes once ids is full
}

// noteResetLocked records that the node reset stream id while the client
// could still send on it. Call with c.mu held.
func (c *h2conn) noteResetLocked(id uint32) {
	r := &c.resets
	if r.ids == nil {
		r.ids = make([]uint32, 0, 2*c.s.cfg.MaxConcurrentStreams)
	}
	if len(r.ids) < cap(r.ids) {
		r.ids = append(r.ids, id)
		return
	}
	r.ids[r.next] = id
	r.next = (r.next + 1) % len(r.ids)
}

// resetByUsLocked reports whether frames on stream id, no longer tracked,
// may be ones the client sent before it saw our RST_STREAM, to be
// discarded. Call with c.mu held.
func (c *h2conn) resetByUsLocked(id uint32) bool {
	return slices.Contains(c.resets.ids, id)
}
