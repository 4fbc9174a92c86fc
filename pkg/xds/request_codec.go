package xds

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
	"unsafe"

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
