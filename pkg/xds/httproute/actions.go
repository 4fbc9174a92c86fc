package httproute

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	networking "istio.io/api/networking/v1"
)

// redirectCodes maps the HTTP status of an Istio redirect to Envoy's enum;
// Istio's default is 301.
var redirectCodes = map[uint32]route.RedirectAction_RedirectResponseCode{
	0:   route.RedirectAction_MOVED_PERMANENTLY,
	301: route.RedirectAction_MOVED_PERMANENTLY,
	302: route.RedirectAction_FOUND,
	303: route.RedirectAction_SEE_OTHER,
	307: route.RedirectAction_TEMPORARY_REDIRECT,
	308: route.RedirectAction_PERMANENT_REDIRECT,
}

func redirect(r *networking.HTTPRedirect) *route.RedirectAction {
	out := &route.RedirectAction{HostRedirect: r.GetAuthority(), ResponseCode: redirectCodes[r.GetRedirectCode()]}
	switch {
	case r.GetUri() != "":
		out.PathRewriteSpecifier = &route.RedirectAction_PathRedirect{PathRedirect: r.GetUri()}
	case r.GetPrefixRewrite() != "":
		out.PathRewriteSpecifier = &route.RedirectAction_PrefixRewrite{PrefixRewrite: r.GetPrefixRewrite()}
	}
	if p := r.GetPort(); p != 0 {
		out.PortRedirect = p
	}
	if s := r.GetScheme(); s != "" {
		out.SchemeRewriteSpecifier = &route.RedirectAction_SchemeRedirect{SchemeRedirect: s}
	}
	return out
}

func directResponse(d *networking.HTTPDirectResponse) *route.DirectResponseAction {
	out := &route.DirectResponseAction{Status: d.GetStatus()}
	switch b := d.GetBody().GetSpecifier().(type) {
	case *networking.HTTPBody_String_:
		out.Body = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: b.String_}}
	case *networking.HTTPBody_Bytes:
		out.Body = &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b.Bytes}}
	}
	return out
}

// rewrite applies Istio's rewrite: uri replaces the matched path prefix (or
// the whole path of an exact match; Envoy rewrites the prefix it matched),
// authority replaces the Host header.
func rewrite(action *route.RouteAction, rw *networking.HTTPRewrite) {
	if rw.GetUri() != "" {
		action.PrefixRewrite = rw.GetUri()
	}
	if re := rw.GetUriRegexRewrite(); re != nil {
		action.RegexRewrite = &matcher.RegexMatchAndSubstitute{
			Pattern:      &matcher.RegexMatcher{Regex: re.GetMatch()},
			Substitution: re.GetRewrite(),
		}
	}
	if rw.GetAuthority() != "" {
		action.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
	}
}

// headerEdits translates one direction's header operations: set overwrites,
// add appends, remove removes.
func headerEdits(ops *networking.Headers_HeaderOperations) ([]*core.HeaderValueOption, []string) {
	if ops == nil {
		return nil, nil
	}
	var add []*core.HeaderValueOption
	for _, name := range sortedKeys(ops.GetSet()) {
		add = append(add, &core.HeaderValueOption{
			Header:       &core.HeaderValue{Key: name, Value: ops.GetSet()[name]},
			AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	for _, name := range sortedKeys(ops.GetAdd()) {
		add = append(add, &core.HeaderValueOption{
			Header:       &core.HeaderValue{Key: name, Value: ops.GetAdd()[name]},
			AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	return add, ops.GetRemove()
}

// mirrors sends a copy of each request to the mirror destinations, Istio's
// mirror (with mirrorPercentage) and mirrors. gRPC clients cannot mirror.
func (t *translation) mirrors(action *route.RouteAction, r *networking.HTTPRoute, field string) {
	type mirror struct {
		dest    *networking.Destination
		percent *networking.Percent
		field   string
	}
	var list []mirror
	if r.GetMirror() != nil {
		list = append(list, mirror{r.GetMirror(), r.GetMirrorPercentage(), field + ".mirror"})
	}
	for i, m := range r.GetMirrors() {
		list = append(list, mirror{m.GetDestination(), m.GetPercentage(), fmt.Sprintf("%s.mirrors[%d]", field, i)})
	}
	if len(list) == 0 {
		return
	}
	if t.in.Flavor == GRPC {
		t.drop(field+".mirror", "gRPC clients cannot mirror calls; ignored")
		return
	}
	for _, m := range list {
		policy := &route.RouteAction_RequestMirrorPolicy{Cluster: t.destination(m.dest, m.field+".destination").cluster()}
		if m.percent != nil {
			policy.RuntimeFraction = &core.RuntimeFractionalPercent{DefaultValue: percent(m.percent.GetValue())}
		}
		action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, policy)
	}
}

// percent expresses a percentage with Envoy's finest denominator, so
// fractions such as 0.5% survive.
func percent(v float64) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: uint32(v * 10000), Denominator: typev3.FractionalPercent_MILLION}
}
