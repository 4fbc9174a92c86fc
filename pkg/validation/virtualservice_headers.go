package validation

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"
)

// headerNamePattern is an HTTP field name: one or more RFC 7230 tchars.
var headerNamePattern = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// pseudoHeaders may be matched on although they are not field names.
var pseudoHeaders = []string{":method", ":authority", ":path", ":scheme", ":status"}

func (p *problems) headerName(path, name string) {
	switch {
	case name == "":
		p.add(path, "header name must not be empty")
	case slices.Contains(pseudoHeaders, name):
	case !headerNamePattern.MatchString(name):
		p.add(path, "%q is not a valid HTTP header name", name)
	}
}

// headerOperations checks header changes. Envoy owns the pseudo-headers
// and Host, except that a request's authority may be set (it is how a
// route picks the Host its upstream sees).
func (p *problems) headerOperations(path string, h *networking.Headers) {
	if h == nil {
		return
	}
	for _, dir := range []struct {
		name string
		ops  *networking.Headers_HeaderOperations
		// authority: may set and add name the authority?
		authority bool
	}{{"request", h.GetRequest(), true}, {"response", h.GetResponse(), false}} {
		dPath := path + "." + dir.name
		for _, op := range []struct {
			name   string
			values map[string]string
		}{{"set", dir.ops.GetSet()}, {"add", dir.ops.GetAdd()}} {
			for _, k := range sortedKeys(op.values) {
				kPath := dPath + "." + op.name + "[" + k + "]"
				p.modifiedHeader(kPath, k, dir.authority)
				p.headerValue(kPath, op.values[k])
			}
		}
		for i, k := range dir.ops.GetRemove() {
			p.modifiedHeader(fmt.Sprintf("%s.remove[%d]", dPath, i), k, false)
		}
	}
}

func (p *problems) modifiedHeader(path, name string, authorityAllowed bool) {
	switch {
	case name == "":
		p.add(path, "header name must not be empty")
	case isAuthorityHeader(name) && authorityAllowed:
	case strings.EqualFold(name, "host"):
		p.add(path, "the Host header cannot be changed here")
	case strings.HasPrefix(name, ":"):
		p.add(path, "pseudo-header %q cannot be changed", name)
	}
}

// headerValue checks a header value as Envoy reads it: %VARIABLE%
// substitutions come in pairs of percent signs (a literal one is %%), and
// control characters other than tab are not allowed.
func (p *problems) headerValue(path, v string) {
	if strings.Count(v, "%")%2 != 0 {
		p.add(path, "a single %% is not allowed: write %%%% for a literal one, or %%VARIABLE%%")
	}
	if strings.ContainsFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
		p.add(path, "control characters are not allowed in a header value")
	}
}

func isAuthorityHeader(name string) bool {
	return strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")
}
