package validation

import (
	"net/netip"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxHostLength is the DNS limit on a full name.
const maxHostLength = 255

// ValidateHost checks a host name of a VirtualService (one of its hosts,
// an SNI name, a gateway's name, or, with validateDestinationHost's
// further rules, a destination): a DNS name of one or more DNS-1123 labels
// (short names are resolved against the namespace later), optionally
// starting with a "*." wildcard, or "*" alone.
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
	// A name of two or more labels whose last is all digits Istio takes
	// for a mistyped address; one label alone is a short name.
	if len(out) == 0 && strings.Contains(host, ".") && !isIP(host) {
		if msg := numericLastLabel(rest); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

// validateDestinationHost checks the host a route sends traffic to: a name
// as ValidateHost reads one, never "*", and, as Istio requires, no IP
// address nor any other name of two or more labels whose last is all
// digits (which Istio takes for an address). A route reaches a service by
// its name.
func validateDestinationHost(host string) []string {
	switch {
	case host == "":
		return []string{"is required"}
	case host == "*":
		return []string{`"*" is not a destination`}
	case isIP(host):
		return []string{quote(host) + " is an IP address: a destination is a service's host name"}
	}
	return ValidateHost(host)
}

// validateRuleHost checks a DestinationRule's host as Istio does. That is
// looser than ValidateHost: labels may have capitals, the name may end
// with a dot, and the first label may be a partial wildcard ("*-east" or
// "*east", matching any host that ends with the rest, as the push context
// serves it). And stricter: the last label may not be all digits, so an
// IPv4 address is no host.
func validateRuleHost(host string) []string {
	switch {
	case host == "":
		return []string{"host is required"}
	case len(host) > maxHostLength:
		return []string{"host is longer than 255 characters"}
	}
	var out []string
	first, rest, _ := strings.Cut(host, ".")
	if !isWildcardLabel(first) {
		if strings.Contains(first, "*") {
			out = append(out, "label "+quote(first)+`: a wildcard is only allowed at the start of the first label ("*", "*x" or "*-x")`)
		} else {
			out = append(out, "label "+quote(first)+" is not letters, digits and inner hyphens, at most 63 long")
		}
	}
	switch {
	case rest == "": // one label, or one and the root's dot
	case strings.Contains(rest, "*"):
		out = append(out, "a wildcard is only allowed in the first label")
	default:
		if msg := dnsNameProblem(rest); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

// isWildcardLabel reports whether label is a DNS label as istioLabelPattern
// reads one, "*", or one after a leading "*" or "*-".
func isWildcardLabel(label string) bool {
	if label == "*" {
		return true
	}
	if len(label) > validation.DNS1123LabelMaxLength {
		return false
	}
	if rest, ok := strings.CutPrefix(label, "*-"); ok {
		label = rest
	} else if rest, ok := strings.CutPrefix(label, "*"); ok {
		label = rest
	}
	return istioLabelPattern.MatchString(label)
}

// subsetNameProblem says what is wrong with a subset name, "" if nothing.
// Istio's rule is a DNS label whose letters may be capitals.
func subsetNameProblem(name string) string {
	if len(name) <= validation.DNS1123LabelMaxLength && istioLabelPattern.MatchString(name) {
		return ""
	}
	return quote(name) + " is not a DNS label: letters, digits and inner hyphens, at most 63 characters"
}

// ValidateExportTo checks the exportTo list of Istio config (not of a
// service) in namespace: each entry is "." (the config's own namespace),
// "*" (every namespace, and then alone) or a namespace name, no entry
// twice, counting "." and the namespace's own name as one. "~" (no
// namespace) is refused as Istio refuses it outside services: config that
// should apply nowhere is deleted instead.
func ValidateExportTo(namespace string, exportTo []string) []string {
	var out []string
	seen := make(map[string]string, len(exportTo)) // namespace -> entry naming it
	for _, e := range exportTo {
		key := e
		if e == "." {
			key = namespace
		}
		if first, dup := seen[key]; dup {
			if first == e {
				out = append(out, "duplicate entry "+quote(e))
			} else {
				out = append(out, "duplicate entry "+quote(e)+": it and "+quote(first)+" both name this namespace")
			}
			continue
		}
		switch e {
		case ".", "*":
		case "~":
			out = append(out, `"~" (no namespace) is allowed only for services`)
			continue
		default:
			msgs := validation.IsDNS1123Label(e)
			for _, msg := range msgs {
				out = append(out, "namespace "+quote(e)+": "+msg)
			}
			if len(msgs) > 0 {
				continue
			}
		}
		seen[key] = e
	}
	if _, all := seen["*"]; all && len(exportTo) > 1 {
		out = append(out, `"*" (every namespace) must be the only entry`)
	}
	return out
}

func quote(s string) string { return `"` + s + `"` }

// istioLabelPattern is a DNS label as Istio checks one in names it does not
// look up in Kubernetes: letters of either case, digits and inner hyphens.
var istioLabelPattern = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)

// dnsNameProblem says what is wrong with name as a DNS name by Istio's
// rules, "" when nothing is: at most 255 characters, labels of at most 63
// that istioLabelPattern matches, an optional final dot, and a last label
// that is not all digits (which tells an IPv4 address from a name).
func dnsNameProblem(name string) string {
	switch {
	case name == "":
		return "empty name"
	case len(name) > maxHostLength:
		return "longer than 255 characters"
	}
	if msg := numericLastLabel(name); msg != "" {
		return msg
	}
	labels := strings.Split(name, ".")
	for i, label := range labels {
		if label == "" && i == len(labels)-1 && i > 0 {
			break // the root's dot
		}
		if len(label) > validation.DNS1123LabelMaxLength || !istioLabelPattern.MatchString(label) {
			return "label " + quote(label) + " is not letters, digits and inner hyphens, at most 63 long"
		}
	}
	return ""
}

// numericLastLabel says that the last label of name is all digits, "" if
// it is not (or name ends with the root's dot). Istio refuses such a name
// where it wants a host name: that is how it tells an IPv4 address.
func numericLastLabel(name string) string {
	last := name[strings.LastIndex(name, ".")+1:]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return "the last label " + quote(last) + " is all digits"
	}
	return ""
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}
