package xds

import (
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// redacted replaces key material in debug output and logs. Private keys
// never leave the control plane except to the proxy entitled to them
// (DESIGN.md, "Security posture").
const redacted = "[redacted]"

// secretFields are the fields whose whole value is key material, matched by
// name wherever they occur, so that every Envoy type that embeds them
// (SDS Secrets, inline certificates of Downstream/UpstreamTlsContext,
// private key provider configs) is covered without listing types:
//   - private_key: TlsCertificate, and the key provider configs (CryptoMb, QAT)
//   - password: TlsCertificate, the private key's password
//   - pkcs12: TlsCertificate, certificate and key in one archive
//   - session_ticket_keys: Secret and DownstreamTlsContext
//   - generic_secret: Secret, arbitrary secret bytes
var secretFields = map[protoreflect.Name]bool{
	"private_key":         true,
	"password":            true,
	"pkcs12":              true,
	"session_ticket_keys": true,
	"generic_secret":      true,
}

// redactedCopy decodes a into a fresh message and blanks every secret field
// in it. The Any itself is shared with every proxy it is being served to and
// is never modified.
func redactedCopy(a *anypb.Any) (*anypb.Any, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	redactMessage(m.ProtoReflect(), false)
	return anypb.New(m)
}

// redactMessage blanks the secret fields of m in place; all blanks every
// string and bytes field (m sits under a secret field).
func redactMessage(m protoreflect.Message, all bool) {
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		redactAnyField(m, all)
		return
	}
	if all {
		// A DataSource (or anything shaped like one) is shown as an inline
		// marker, which reads better than a marker in each of its fields.
		if fd := m.Descriptor().Fields().ByName("inline_string"); fd != nil && fd.Kind() == protoreflect.StringKind {
			for i := range m.Descriptor().Fields().Len() {
				m.Clear(m.Descriptor().Fields().Get(i))
			}
			m.Set(fd, protoreflect.ValueOfString(redacted))
			return
		}
	}
	// Collect first: setting fields during Range is undefined.
	type field struct {
		fd protoreflect.FieldDescriptor
		v  protoreflect.Value
	}
	var fields []field
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fields = append(fields, field{fd, v})
		return true
	})
	for _, f := range fields {
		secret := all || secretFields[f.fd.Name()]
		switch {
		case f.fd.IsList():
			l := f.v.List()
			for i := range l.Len() {
				if v, ok := redactValue(f.fd, l.Get(i), secret); ok {
					l.Set(i, v)
				}
			}
		case f.fd.IsMap():
			mp := f.v.Map()
			var updates []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				updates = append(updates, k)
				return true
			})
			for _, k := range updates {
				if v, ok := redactValue(f.fd.MapValue(), mp.Get(k), secret); ok {
					mp.Set(k, v)
				}
			}
		default:
			if v, ok := redactValue(f.fd, f.v, secret); ok {
				m.Set(f.fd, v)
			}
		}
	}
}

// redactValue returns the replacement of one singular value, and whether
// it must be set (messages are redacted in place).
func redactValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, secret bool) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		redactMessage(v.Message(), secret)
		return v, false
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(redacted), secret
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(redacted)), secret
	}
	return v, false
}

// redactAnyField redacts what an Any holds and packs it again. Content this
// binary cannot decode cannot be inspected, so its bytes are dropped.
func redactAnyField(m protoreflect.Message, all bool) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		a.Value = nil
		return
	}
	redactMessage(inner.ProtoReflect(), all)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil {
		a.Value = nil
		return
	}
	a.Value = b
}

var (
	// pemPrivateKey matches a PEM private key block, or one cut short
	// (a client may truncate its error message).
	pemPrivateKey = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)`)
	// textSecretField matches a secret field printed in protobuf text or
	// JSON form, as Envoy quotes offending config in validation errors;
	// its value nests at most one level (GenericSecret{secret{...}}).
	textSecretField = regexp.MustCompile(`"?\b(` + secretFieldNames() + `)\b"?\s*:?\s*\{(?:[^{}]|\{[^{}]*\})*\}`)
)

// secretFieldNames is secretFields in proto and JSON spelling, as a regexp
// alternation.
func secretFieldNames() string {
	var names []string
	for n := range secretFields {
		parts := strings.Split(string(n), "_")
		for i := 1; i < len(parts); i++ {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
		names = append(names, string(n), strings.Join(parts, ""))
	}
	return strings.Join(names, "|")
}

// redactText blanks private keys in free text: a client's NACK message can
// quote the config it rejected, keys included, and it is logged and shown
// in /debug/syncz.
func redactText(s string) string {
	s = textSecretField.ReplaceAllString(s, "$1 { "+redacted+" }")
	return pemPrivateKey.ReplaceAllString(s, redacted)
}
