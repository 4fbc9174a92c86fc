package xds

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"unicode/utf8"
	"unsafe"
	"weak"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Envoy repeats every EDS cluster name in each EDS request and ACK: 5,000
// names, three or four times per sidecar while it connects. Decoded by
// proto.Unmarshal, each name is a string of its own, and 50 sidecars'
// requests made a fifth of the control plane's CPU in a connect storm,
// mostly allocation and the garbage collection of it. unmarshalRequest
// decodes resource_names into one string per request, and the names are
// slices of it; everything else is proto.Unmarshal's.

var (
	requestDesc        = (&discoveryv3.DiscoveryRequest{}).ProtoReflect().Descriptor()
	reqResourceNames   = requestDesc.Fields().ByName("resource_names").Number()
	errInvalidNameUTF8 = errors.New("proto: resource_names holds invalid UTF-8")
)

// unmarshalRequest decodes b into req as proto.Unmarshal does.
func unmarshalRequest(b []byte, req *discoveryv3.DiscoveryRequest) error {
	start, end, names, ok := sharedRequestNames.recognize(b)
	if !ok {
		if start, end, ok = contiguousNames(b); !ok || end-start < sharedNamesMin {
			return decodeRequest(b, req)
		}
		var err error
		if names, err = sharedRequestNames.decode(b[start:end]); err != nil {
			return err
		}
	}
	rest := make([]byte, 0, len(b)-(end-start))
	rest = append(append(rest, b[:start]...), b[end:]...)
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.ResourceNames = names
	return nil
}

// decodeRequest is unmarshalRequest without the shared lists.
func decodeRequest(b []byte, req *discoveryv3.DiscoveryRequest) error {
	// One pass checks the framing, copies the names into one buffer and
	// keeps every other field, in order, for proto.Unmarshal. The buffer is
	// sized to what remains of b when the first name comes, so it never
	// grows: each name is final once copied, and becomes a string over its
	// bytes (unsafe.String; nothing writes to them again, as strings.Builder
	// relies on too).
	var (
		names, rest []byte
		list        []string
	)
	restStart, inRest := 0, false
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return proto.Unmarshal(b, req) // its error
		}
		if num != reqResourceNames || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
			if m < 0 {
				return proto.Unmarshal(b, req)
			}
			if !inRest {
				restStart, inRest = off, true
			}
			off += n + m
			continue
		}
		v, m := protowire.ConsumeBytes(b[off+n:])
		if m < 0 {
			return proto.Unmarshal(b, req)
		}
		if names == nil {
			names = make([]byte, 0, len(b)-off)
			// Names of one request are of similar length: the first says
			// about how many there are.
			list = make([]string, 0, (len(b)-off)/(n+m)+1)
		}
		names = append(names, v...)
		name := names[len(names)-len(v):]
		list = append(list, unsafe.String(unsafe.SliceData(name), len(name)))
		if inRest {
			rest = append(rest, b[restStart:off]...)
			inRest = false
		}
		off += n + m
	}
	if list == nil {
		return proto.Unmarshal(b, req)
	}
	// Names are almost always ASCII: one check of them all, and a name by
	// name one (UTF-8 may not straddle two names) only when they are not.
	if !isASCII(names) {
		for _, name := range list {
			if !utf8.ValidString(name) {
				return errInvalidNameUTF8
			}
		}
	}
	if inRest {
		rest = append(rest, b[restStart:]...)
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.ResourceNames = list
	return nil
}

// Even as one string, each sidecar's ACK of 5,000 names cost a quarter of a
// MiB to decode, and under endpoint churn, when 50 sidecars ACK every EDS
// push, decoding and collecting them was half of the control plane's CPU.
// Identical sidecars send identical names, byte for byte: requestNameLists
// decodes such a list once and hands every request the same (read-only)
// slice while one of them still holds it.
type requestNameLists struct {
	mu sync.Mutex
	m  map[uint64]sharedNames
	// recent are the lists last decoded or found, newest first, which
	// recognize compares a request with before anything else.
	recent [recentNameLists]sharedNames
}

// recentNameLists is how many lists recognize tries: the sidecars of one
// namespace (one sidecar scope) repeat one list, and a few namespaces
// churning at once repeat a few.
const recentNameLists = 4

// sharedNames is a decoded list, held weakly by its first element, and
// the encoding it was decoded from.
type sharedNames struct {
	first weak.Pointer[string]
	n     int
	raw   []byte
}

// sharedNamesMin is the smallest encoding of a list worth sharing.
const sharedNamesMin = 4 << 10

// namesTag is the one-byte tag of a resource_names field.
var namesTag = byte(protowire.EncodeTag(reqResourceNames, protowire.BytesType))

var sharedRequestNames requestNameLists

// recognize finds, in the request b, the names of one of the recent lists,
// without parsing them: where the first resource_names field starts, b
// must hold that list's encoding byte for byte, and no resource_names
// field after it. That is one comparison of memory in place of walking,
// hashing and then comparing thousands of names, which under endpoint
// churn every sidecar's ACK costs.
func (l *requestNameLists) recognize(b []byte) (start, end int, names []string, ok bool) {
	if start = firstNames(b); start < 0 {
		return 0, 0, nil, false
	}
	l.mu.Lock()
	recent := l.recent
	l.mu.Unlock()
	for _, e := range recent {
		end = start + len(e.raw)
		if e.raw == nil || end > len(b) || !bytes.Equal(b[start:end], e.raw) || firstNames(b[end:]) != -1 {
			continue
		}
		if first := e.first.Value(); first != nil {
			return start, end, unsafe.Slice(first, e.n), true
		}
	}
	return 0, 0, nil, false
}

// decode returns the names that region, resource_names fields and nothing
// else, encodes.
func (l *requestNameLists) decode(region []byte) ([]string, error) {
	h := maphash.Bytes(namesSeed, region)
	l.mu.Lock()
	e, found := l.m[h]
	l.mu.Unlock()
	if found {
		if first := e.first.Value(); first != nil && bytes.Equal(e.raw, region) {
			l.remember(e)
			return unsafe.Slice(first, e.n), nil
		}
	}
	var decoded discoveryv3.DiscoveryRequest
	if err := decodeRequest(region, &decoded); err != nil {
		return nil, err
	}
	names := decoded.ResourceNames
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]sharedNames{}
	}
	// A list of the same hash that is still alive keeps its entry.
	if e, found := l.m[h]; !found || e.first.Value() == nil {
		e = sharedNames{first: weak.Make(&names[0]), n: len(names), raw: bytes.Clone(region)}
		l.m[h] = e
		runtime.AddCleanup(&names[0], l.forget, h)
		l.rememberLocked(e)
	}
	return names, nil
}

// remember makes e the newest of the recent lists.
func (l *requestNameLists) remember(e sharedNames) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rememberLocked(e)
}

func (l *requestNameLists) rememberLocked(e sharedNames) {
	i := 0
	for i < len(l.recent)-1 && l.recent[i].first != e.first {
		i++
	}
	copy(l.recent[1:i+1], l.recent[:i])
	l.recent[0] = e
}

// forget drops the entry of hash h once its list is gone, and every recent
// list that is gone.
func (l *requestNameLists) forget(h uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[h]; ok && e.first.Value() == nil {
		delete(l.m, h)
	}
	for i, e := range l.recent {
		if e.raw != nil && e.first.Value() == nil {
			l.recent[i] = sharedNames{}
		}
	}
}

// firstNames returns where the first resource_names field of b starts;
// -1 when b, well formed, has none, and -2 when b is malformed before one.
func firstNames(b []byte) int {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return -2
		}
		if num == reqResourceNames && typ == protowire.BytesType {
			return off
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if m < 0 {
			return -2
		}
		off += n + m
	}
	return -1
}

// contiguousNames finds the resource_names fields of b: the region from the
// first to the end of the last, and whether nothing else lies between
// them (as clients marshal requests: field by field, in order). ok is also
// false when b has no names or is malformed.
func contiguousNames(b []byte) (start, end int, ok bool) {
	start = -1
	for off := 0; off < len(b); {
		var next int
		var name bool
		if b[off] == namesTag {
			// A name: the common case, without the general decoding.
			l, n := protowire.ConsumeVarint(b[off+1:])
			if n < 0 || l > uint64(len(b)-off-1-n) {
				return 0, 0, false
			}
			next, name = off+1+n+int(l), true
		} else {
			num, typ, n := protowire.ConsumeTag(b[off:])
			if n < 0 {
				return 0, 0, false
			}
			m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
			if m < 0 {
				return 0, 0, false
			}
			// Any other field, or a name whose tag is not in its shortest form.
			next, name = off+n+m, num == reqResourceNames && typ == protowire.BytesType
		}
		if name {
			if start < 0 {
				start = off
			} else if end != off {
				return 0, 0, false
			}
			end = next
		}
		off = next
	}
	return start, end, start >= 0
}

func isASCII(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b)&0x8080808080808080 != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
