package httproute

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// defaultRetryOn is Istio's retry condition when a VirtualService sets
// attempts but no retryOn.
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// grpcRetryOn are the conditions gRPC clients retry on (gRFC A44); they
// ignore every other one.
var grpcRetryOn = map[string]bool{
	"cancelled": true, "deadline-exceeded": true, "internal": true, "resource-exhausted": true, "unavailable": true,
}

// retry translates a route's retries. Without any, Envoy gets the mesh
// default (Input.DefaultRetry) and gRPC none; attempts 0 turns retries off.
func (t *translation) retry(r *networking.HTTPRetry, field string) *route.RetryPolicy {
	if r == nil {
		if t.in.Flavor == GRPC {
			return nil
		}
		return t.in.DefaultRetry
	}
	if r.GetAttempts() <= 0 {
		return nil
	}
	if t.in.Flavor == GRPC {
		return t.grpcRetry(r, field)
	}
	var out *route.RetryPolicy
	if t.in.Flavor == Envoy && t.in.DefaultRetry != nil {
		// Keep the default's host predicate: a retry goes to another
		// endpoint where there is one.
		out = proto.Clone(t.in.DefaultRetry).(*route.RetryPolicy)
	} else {
		out = &route.RetryPolicy{}
	}
	out.NumRetries = wrapperspb.UInt32(uint32(r.GetAttempts()))
	out.PerTryTimeout = r.GetPerTryTimeout()
	out.RetryOn, out.RetriableStatusCodes = retryOn(r.GetRetryOn())
	return out
}

// grpcRetry keeps the conditions of retryOn that gRPC clients retry on.
// Every other condition the rule names, HTTP status codes included, is
// reported; Istio's default, used when the rule names none, is not the
// rule's doing, so what gRPC cannot use of it is left out unreported.
// gRPC has no per-try timeout (gRFC A44), which is reported too.
func (t *translation) grpcRetry(r *networking.HTTPRetry, field string) *route.RetryPolicy {
	spec, given := r.GetRetryOn(), r.GetRetryOn() != ""
	if !given {
		spec = defaultRetryOn
	}
	var kept []string
	for _, c := range strings.Split(spec, ",") {
		c = strings.TrimSpace(c)
		switch {
		case grpcRetryOn[c]:
			kept = append(kept, c)
		case c != "" && given:
			t.drop(field+".retryOn", "gRPC clients do not retry on "+strconv.Quote(c)+"; left out for them")
		}
	}
	if r.GetPerTryTimeout() != nil {
		t.drop(field+".perTryTimeout", "gRPC clients have no per-try timeout; ignored for them")
	}
	if len(kept) == 0 {
		return nil
	}
	return &route.RetryPolicy{
		NumRetries:    wrapperspb.UInt32(uint32(r.GetAttempts())),
		PerTryTimeout: r.GetPerTryTimeout(),
		RetryOn:       strings.Join(kept, ","),
	}
}

// retryOn splits Istio's retryOn into Envoy's conditions and the HTTP
// status codes it lists, which Envoy takes separately, under the
// retriable-status-codes condition.
func retryOn(spec string) (string, []uint32) {
	if spec == "" {
		return defaultRetryOn, nil
	}
	var conds []string
	var codes []uint32
	for _, c := range strings.Split(spec, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if n, err := strconv.ParseUint(c, 10, 32); err == nil {
			codes = append(codes, uint32(n))
			continue
		}
		conds = append(conds, c)
	}
	if len(codes) > 0 && !slices.Contains(conds, "retriable-status-codes") {
		conds = append(conds, "retriable-status-codes")
	}
	return strings.Join(conds, ","), codes
}
