package validation

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxHostLength is the DNS limit on a full name.
const maxHostLength = 255

// ValidateHost checks a destination host: a DNS name of one or more
// DNS-1123 labels (short names are resolved against the namespace later),
// optionally starting with a "*." wildcard, or "*" alone.
func ValidateHost(host string) []string {
	if host == "" {
		return []string{"host is required"}
	}
	if host == "*" {
		return nil
	}
	if len(host) > maxHostLength {
		return []string{"host is longer than 255 characters"}
	}
	rest := strings.TrimPrefix(host, "*.")
	if strings.HasSuffix(rest, ".") {
		return []string{"host must not end with a dot"}
	}
	var out []string
	for label := range strings.SplitSeq(rest, ".") {
		if strings.Contains(label, "*") {
			out = append(out, "a wildcard is only allowed as the whole first label")
			continue
		}
		for _, msg := range validation.IsDNS1123Label(label) {
			out = append(out, "label "+quote(label)+": "+msg)
		}
	}
	return out
}

// ValidateExportTo checks an exportTo list: each entry is "." (own
// namespace), "*" (everyone), "~" (nobody, and then alone) or a namespace
// name; no entry twice.
func ValidateExportTo(exportTo []string) []string {
	var out []string
	seen := make(map[string]bool, len(exportTo))
	for _, e := range exportTo {
		if seen[e] {
			out = append(out, "duplicate entry "+quote(e))
		}
		seen[e] = true
		switch e {
		case ".", "*":
		case "~":
			if len(exportTo) > 1 {
				out = append(out, `"~" must be the only entry`)
			}
		default:
			for _, msg := range validation.IsDNS1123Label(e) {
				out = append(out, "namespace "+quote(e)+": "+msg)
			}
		}
	}
	return out
}

func quote(s string) string { return `"` + s + `"` }
