package validation

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	networking "istio.io/api/networking/v1"
)

// maxDirectResponseBody is the largest inline body Istio accepts; every
// proxy holds it in its route configuration.
const maxDirectResponseBody = 1 << 20

// retryOnPolicies are the conditions Envoy's x-envoy-retry-on and
// x-envoy-retry-grpc-on understand; retryOn may also list status codes.
var retryOnPolicies = []string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "envoy-ratelimited",
	"http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}

// corsMethods are the methods a CORS policy may allow.
var corsMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// grpcStatuses are the gRPC status names an abort fault may return.
var grpcStatuses = []string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// httpDestinations checks where an HTTP route sends its traffic, and the
// header changes of each destination.
func (p *problems) httpDestinations(path string, ds []*networking.HTTPRouteDestination) {
	var total int64
	for i, d := range ds {
		dPath := fmt.Sprintf("%s[%d]", path, i)
		if d == nil {
			p.add(dPath, "must not be null")
			continue
		}
		total += p.weightedDestination(dPath, d)
		p.headerOperations(dPath+".headers", d.GetHeaders())
	}
	p.totalWeight(path, len(ds), total)
}

// weighted is what HTTP and TCP/TLS route destinations have in common.
type weighted interface {
	GetDestination() *networking.Destination
	GetWeight() int32
}

// weightedDestination checks one destination of a route and returns the
// weight it adds to the route's total.
func (p *problems) weightedDestination(path string, d weighted) int64 {
	if d.GetDestination() == nil {
		p.add(path+".destination", "is required")
	} else {
		p.destination(path+".destination", d.GetDestination())
	}
	p.checkNonNegative(path+".weight", d.GetWeight())
	return int64(max(d.GetWeight(), 0))
}

// totalWeight checks that traffic split between destinations goes
// somewhere. Weights are relative: a lone destination takes everything
// whatever its weight, but several must not all weigh zero.
func (p *problems) totalWeight(path string, n int, total int64) {
	if n > 1 && total == 0 {
		p.add(path, "the weights of %d destinations add up to 0: at least one must be positive", n)
	}
}

func (p *problems) destination(path string, d *networking.Destination) {
	for _, msg := range validateDestinationHost(d.GetHost()) {
		p.add(path+".host", "%s", msg)
	}
	if s := d.GetSubset(); s != "" {
		if msg := subsetNameProblem(s); msg != "" {
			p.add(path+".subset", "%s", msg)
		}
	}
	if d.GetPort() != nil {
		p.checkPort(path+".port.number", d.GetPort().GetNumber())
	}
}

func (p *problems) redirect(path string, r *networking.HTTPRedirect) {
	if r == nil {
		return
	}
	if r.GetUri() == "" && r.GetAuthority() == "" && r.GetScheme() == "" && r.GetPrefixRewrite() == "" &&
		r.GetRedirectPort() == nil {
		p.add(path, "must set at least one of uri, prefixRewrite, authority, scheme, port or derivePort")
	}
	if r.GetUri() != "" && r.GetPrefixRewrite() != "" {
		p.add(path, "uri and prefixRewrite are mutually exclusive")
	}
	if c := r.GetRedirectCode(); c != 0 && (c < 300 || c > 399) {
		p.add(path+".redirectCode", "must be a 3xx status, got %d", c)
	}
	if s := r.GetScheme(); s != "" && s != "http" && s != "https" {
		p.add(path+".scheme", `must be "http" or "https", got %q`, s)
	}
	if port, ok := r.GetRedirectPort().(*networking.HTTPRedirect_Port); ok {
		p.checkPort(path+".port", port.Port)
	}
}

func (p *problems) directResponse(path string, d *networking.HTTPDirectResponse) {
	if d == nil {
		return
	}
	p.httpStatus(path+".status", int64(d.GetStatus()))
	if b := d.GetBody(); b != nil {
		if size := len(b.GetString_()) + len(b.GetBytes()); size > maxDirectResponseBody {
			p.add(path+".body", "must be at most 1 MiB, got %d bytes", size)
		}
	}
}

func (p *problems) httpStatus(path string, status int64) {
	if status < 200 || status > 599 {
		p.add(path, "must be an HTTP status in 200..599, got %d", status)
	}
}

func (p *problems) rewrite(path string, r *networking.HTTPRewrite) {
	if r == nil {
		return
	}
	re := r.GetUriRegexRewrite()
	if r.GetUri() != "" && re != nil {
		p.add(path, "uri and uriRegexRewrite are mutually exclusive")
	}
	if r.GetUri() == "" && re == nil && r.GetAuthority() == "" {
		p.add(path, "must set uri, uriRegexRewrite or authority")
	}
	if re != nil {
		if re.GetRewrite() == "" {
			p.add(path+".uriRegexRewrite.rewrite", "is required")
		}
		p.regex(path+".uriRegexRewrite.match", re.GetMatch())
	}
}

func (p *problems) retries(path string, r *networking.HTTPRetry) {
	if r == nil {
		return
	}
	p.checkNonNegative(path+".attempts", r.GetAttempts())
	if r.GetAttempts() == 0 && (r.GetPerTryTimeout() != nil || r.GetRetryOn() != "" || r.GetRetryRemoteLocalities() != nil) {
		p.add(path, "attempts is 0 (retries disabled), so perTryTimeout, retryOn and retryRemoteLocalities have no effect: remove them or set attempts")
	}
	p.checkMillis(path+".perTryTimeout", r.GetPerTryTimeout())
	p.checkMillis(path+".backoff", r.GetBackoff())
	if r.GetRetryOn() == "" {
		return
	}
	for cond := range strings.SplitSeq(r.GetRetryOn(), ",") {
		if slices.Contains(retryOnPolicies, cond) {
			continue
		}
		if code, err := strconv.Atoi(cond); err == nil && http.StatusText(code) != "" {
			continue
		}
		p.add(path+".retryOn", "%q is neither a retry condition nor an HTTP status code", cond)
	}
}

func (p *problems) fault(path string, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if f.GetAbort() == nil && f.GetDelay() == nil {
		p.add(path, "must set abort, delay or both")
	}
	if d := f.GetDelay(); d != nil {
		if d.GetPercentage() != nil {
			p.checkPercent(path+".delay.percentage.value", d.GetPercentage().GetValue())
		}
		//lint:ignore SA1019 users may still set the deprecated field; it is validated like the rest
		p.checkPercent(path+".delay.percent", float64(d.GetPercent()))
		switch t := d.GetHttpDelayType().(type) {
		case nil:
			p.add(path+".delay.fixedDelay", "is required")
		case *networking.HTTPFaultInjection_Delay_FixedDelay:
			p.checkMillis(path+".delay.fixedDelay", t.FixedDelay)
		case *networking.HTTPFaultInjection_Delay_ExponentialDelay:
			p.add(path+".delay.exponentialDelay", "is not supported: use fixedDelay")
		}
	}
	if a := f.GetAbort(); a != nil {
		if a.GetPercentage() != nil {
			p.checkPercent(path+".abort.percentage.value", a.GetPercentage().GetValue())
		}
		switch t := a.GetErrorType().(type) {
		case nil:
			p.add(path+".abort", "must set httpStatus or grpcStatus")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			p.httpStatus(path+".abort.httpStatus", int64(t.HttpStatus))
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if !slices.Contains(grpcStatuses, t.GrpcStatus) {
				p.add(path+".abort.grpcStatus", "%q is not a gRPC status name (such as UNAVAILABLE)", t.GrpcStatus)
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			p.add(path+".abort.http2Error", "is not supported: use httpStatus or grpcStatus")
		}
	}
}

func (p *problems) cors(path string, c *networking.CorsPolicy) {
	if c == nil {
		return
	}
	for i, o := range c.GetAllowOrigins() {
		oPath := fmt.Sprintf("%s.allowOrigins[%d]", path, i)
		if o.GetExact() == "" && o.GetPrefix() == "" && o.GetRegex() == "" {
			p.add(oPath, "must set a non-empty exact, prefix or regex")
			continue
		}
		p.stringMatch(oPath, o)
	}
	for i, m := range c.GetAllowMethods() {
		if !slices.Contains(corsMethods, m) {
			p.add(fmt.Sprintf("%s.allowMethods[%d]", path, i), "%q is not an HTTP method", m)
		}
	}
	for _, field := range []struct {
		name  string
		names []string
	}{{"allowHeaders", c.GetAllowHeaders()}, {"exposeHeaders", c.GetExposeHeaders()}} {
		for i, h := range field.names {
			if h == "*" {
				continue
			}
			p.headerName(fmt.Sprintf("%s.%s[%d]", path, field.name, i), h)
		}
	}
	if age := c.GetMaxAge(); age != nil {
		p.checkMillis(path+".maxAge", age)
		if age.GetNanos() != 0 {
			p.add(path+".maxAge", "must be whole seconds (Access-Control-Max-Age counts seconds)")
		}
	}
}

// checkMillis checks a duration Envoy takes in milliseconds: at least one,
// and whole ones, since finer digits would be dropped without a word.
func (p *problems) checkMillis(path string, d *durationpb.Duration) {
	if d == nil || d.CheckValid() != nil || d.AsDuration() < minDuration {
		p.checkDuration(path, d)
		return
	}
	if d.AsDuration()%time.Millisecond != 0 {
		p.add(path, "must be whole milliseconds, got %v", d.AsDuration())
	}
}
