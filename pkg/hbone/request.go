package hbone

import (
	"errors"
	"net/http"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// request is what the HEADERS that open a stream ask for.
type request struct {
	method, authority string
	// tooLarge says the field section exceeded maxHeaderListSize, and the
	// framer dropped the fields past it.
	tooLarge bool
}

// parseRequest reads a request's pseudo-header fields, or says why the
// request is malformed (RFC 9113 §8.1.1): a stream error PROTOCOL_ERROR,
// never a response. The framer has already refused unknown, repeated and
// misplaced pseudo-header fields (§8.3) and upper-case names (§8.2.1).
func parseRequest(f *http2.MetaHeadersFrame) (request, error) {
	r := request{tooLarge: f.Truncated}
	var hasAuthority, hasScheme, hasPath bool
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			r.method = hf.Value
		case ":authority":
			r.authority, hasAuthority = hf.Value, hf.Value != ""
		case ":scheme":
			hasScheme = true
		case ":path":
			hasPath = true
		case ":protocol":
			// Extended CONNECT is only for a server that offered
			// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 §3), which
			// HBONE never does.
			return r, errors.New("request with :protocol")
		}
	}
	if err := connectionSpecific(f.RegularFields()); err != nil {
		return r, err
	}
	switch {
	case r.method == "":
		return r, errors.New("request without :method")
	case r.method != http.MethodConnect:
		// Refused with 405 if well-formed: every method but CONNECT
		// needs :scheme and :path (§8.3.1).
		if !hasScheme || !hasPath {
			return r, errors.New(r.method + " request without :scheme and :path")
		}
	case hasScheme || hasPath:
		// §8.5: a CONNECT names its destination in :authority alone.
		return r, errors.New("CONNECT with :scheme or :path")
	case !hasAuthority:
		// Nor does a host header stand in for it, as it may for
		// other methods (§8.3.1).
		return r, errors.New("CONNECT without :authority")
	}
	return r, nil
}

// connectionSpecific says which field, if any, makes a request malformed
// as connection-specific (RFC 9113 §8.2.2). HTTP/2 carries connection
// metadata in its own frames, so these fields have no meaning in it; a
// proxy that let one through could have it read by an HTTP/1.1 hop
// behind it (upgrade, transfer-encoding) as if the source had meant it.
// te alone may come, and only as "trailers". Names are lower case by now.
func connectionSpecific(fields []hpack.HeaderField) error {
	for _, hf := range fields {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return errors.New("connection-specific field " + hf.Name)
		case "te":
			if hf.Value != "trailers" {
				return errors.New("te other than trailers")
			}
		}
	}
	return nil
}
