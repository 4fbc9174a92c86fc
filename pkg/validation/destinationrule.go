package validation

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"
	"istio.io/api/networking/v1alpha3"
)

// ValidateDestinationRule returns every problem with a DestinationRule, or
// nil. name and namespace are the object's metadata.
func ValidateDestinationRule(name, namespace string, dr *networking.DestinationRule) error {
	var p problems
	p.objectMeta(name, namespace)
	if dr == nil {
		p.add("spec", "is required")
		return p.err()
	}
	for _, msg := range validateRuleHost(dr.GetHost()) {
		p.add("spec.host", "%s", msg)
	}
	for _, msg := range ValidateExportTo(namespace, dr.GetExportTo()) {
		p.add("spec.exportTo", "%s", msg)
	}
	if dr.GetWorkloadSelector() != nil {
		// Such a rule is only ever used by the proxies it selects in its
		// own namespace; Istio refuses an exportTo that claims more.
		for _, e := range dr.GetExportTo() {
			if e != "." && e != namespace {
				p.add("spec.exportTo", "a rule with a workloadSelector applies only to proxies of its own namespace; exportTo may only name that namespace, not %q", e)
			}
		}
	}
	p.trafficPolicy("spec.trafficPolicy", namespace, dr.GetTrafficPolicy())
	p.subsets(namespace, dr.GetSubsets())
	// A selector without labels picks every proxy of the rule's namespace;
	// Istio only warns about it, and the push context serves it so.
	p.labels("spec.workloadSelector.matchLabels", dr.GetWorkloadSelector().GetMatchLabels())
	return p.err()
}

func (p *problems) subsets(namespace string, subsets []*v1alpha3.Subset) {
	seen := make(map[string]bool, len(subsets))
	for i, s := range subsets {
		path := fmt.Sprintf("spec.subsets[%d]", i)
		switch name := s.GetName(); {
		case name == "":
			p.add(path+".name", "is required")
		default:
			if msg := subsetNameProblem(name); msg != "" {
				p.add(path+".name", "%s", msg)
			}
			if seen[name] {
				p.add(path+".name", "duplicate subset name %q", name)
			}
			seen[name] = true
		}
		// A subset without labels is every endpoint of the host, as in
		// Istio: a way to give all of them a policy under a subset name.
		p.labels(path+".labels", s.GetLabels())
		p.trafficPolicy(path+".trafficPolicy", namespace, s.GetTrafficPolicy())
	}
}

// trafficPolicy checks a policy of a rule in namespace.
func (p *problems) trafficPolicy(path, namespace string, tp *v1alpha3.TrafficPolicy) {
	if tp == nil {
		return
	}
	// Istio refuses a policy that sets nothing: it is most likely a field
	// written at the wrong level.
	if tp.GetLoadBalancer() == nil && tp.GetConnectionPool() == nil && tp.GetOutlierDetection() == nil &&
		tp.GetTls() == nil && len(tp.GetPortLevelSettings()) == 0 && tp.GetTunnel() == nil &&
		tp.GetProxyProtocol() == nil && tp.GetRetryBudget() == nil {
		p.add(path, "must set at least one of loadBalancer, connectionPool, outlierDetection, tls, portLevelSettings, tunnel, proxyProtocol or retryBudget")
	}
	// Both would wrap the upstream connection; Istio allows one.
	if tp.GetTunnel() != nil && tp.GetProxyProtocol() != nil {
		p.add(path, "only one of tunnel and proxyProtocol may be set")
	}
	p.loadBalancer(path+".loadBalancer", tp.GetLoadBalancer())
	p.connectionPool(path+".connectionPool", tp.GetConnectionPool())
	p.outlierDetection(path+".outlierDetection", tp.GetOutlierDetection())
	p.tls(path+".tls", namespace, tp.GetTls())
	p.tunnel(path+".tunnel", tp.GetTunnel())
	if pp := tp.GetProxyProtocol(); pp != nil {
		if _, ok := v1alpha3.TrafficPolicy_ProxyProtocol_VERSION_name[int32(pp.GetVersion())]; !ok {
			p.add(path+".proxyProtocol.version", "unknown version %d", pp.GetVersion())
		}
	}
	if rb := tp.GetRetryBudget(); rb != nil {
		if rb.GetPercent() != nil {
			p.checkPercent(path+".retryBudget.percent", rb.GetPercent().GetValue())
		}
		p.checkDuration(path+".retryBudget.budgetInterval", rb.GetBudgetInterval())
	}
	// Two entries for one port are admitted, as Istio admits them; the
	// first is the one used, there as in the push context (policyForPort).
	for i, pls := range tp.GetPortLevelSettings() {
		plsPath := fmt.Sprintf("%s.portLevelSettings[%d]", path, i)
		if pls.GetPort() == nil {
			p.add(plsPath+".port", "is required")
		} else {
			p.checkPort(plsPath+".port.number", pls.GetPort().GetNumber())
		}
		if pls.GetLoadBalancer() == nil && pls.GetConnectionPool() == nil && pls.GetOutlierDetection() == nil && pls.GetTls() == nil {
			p.add(plsPath, "must set at least one of loadBalancer, connectionPool, outlierDetection or tls")
		}
		p.loadBalancer(plsPath+".loadBalancer", pls.GetLoadBalancer())
		p.connectionPool(plsPath+".connectionPool", pls.GetConnectionPool())
		p.outlierDetection(plsPath+".outlierDetection", pls.GetOutlierDetection())
		p.tls(plsPath+".tls", namespace, pls.GetTls())
	}
}

// loadBalancer checks the LB policy. simple, consistentHash and
// backendUtilization share a proto oneof, so a spec can never carry two;
// the YAML/JSON decoder rejects a document that sets both.
func (p *problems) loadBalancer(path string, lb *v1alpha3.LoadBalancerSettings) {
	if lb == nil {
		return
	}
	switch policy := lb.GetLbPolicy().(type) {
	case *v1alpha3.LoadBalancerSettings_Simple:
		if _, ok := v1alpha3.LoadBalancerSettings_SimpleLB_name[int32(policy.Simple)]; !ok {
			p.add(path+".simple", "unknown load balancer %d", policy.Simple)
		}
	case *v1alpha3.LoadBalancerSettings_ConsistentHash:
		p.consistentHash(path+".consistentHash", policy.ConsistentHash)
	case *v1alpha3.LoadBalancerSettings_BackendUtilization:
		bu := policy.BackendUtilization
		p.checkDuration(path+".backendUtilization.weightStabilizationPeriod", bu.GetWeightStabilizationPeriod())
		p.checkDuration(path+".backendUtilization.weightExpirationPeriod", bu.GetWeightExpirationPeriod())
		p.checkDuration(path+".backendUtilization.weightUpdatePeriod", bu.GetWeightUpdatePeriod())
	}
	if lb.GetLocalityLbSetting() != nil && lb.GetZoneAwareLbSetting() != nil {
		p.add(path, "only one of localityLbSetting and zoneAwareLbSetting may be set")
	}
	p.localityLB(path+".localityLbSetting", lb.GetLocalityLbSetting())
	p.zoneAwareLB(path+".zoneAwareLbSetting", lb.GetZoneAwareLbSetting())
	p.checkDuration(path+".warmupDurationSecs", lb.GetWarmupDurationSecs())
	if w := lb.GetWarmup(); w != nil {
		// Without a duration there is no slow start window, and the rest
		// would mean nothing; Istio requires it.
		if w.GetDuration() == nil {
			p.add(path+".warmup.duration", "is required")
		}
		p.checkMillis(path+".warmup.duration", w.GetDuration())
		if w.GetMinimumPercent() != nil {
			p.checkPercent(path+".warmup.minimumPercent", w.GetMinimumPercent().GetValue())
		}
		// Any positive aggression shapes the ramp (below 1 it starts
		// slower); written so that NaN fails too.
		if a := w.GetAggression(); a != nil && !(a.GetValue() > 0) {
			p.add(path+".warmup.aggression", "must be greater than 0, got %v", a.GetValue())
		}
	}
}

// maxMaglevTableSize bounds maglev.tableSize from above, as Istio does: it
// refuses Envoy's largest size, 5000011, too.
const maxMaglevTableSize = 5000011

// consistentHash checks a consistent hash. Without a hash key (or with
// useSourceIp false) Istio admits it, and Envoy then hashes each request
// at random; it is not refused here either.
func (p *problems) consistentHash(path string, ch *v1alpha3.LoadBalancerSettings_ConsistentHashLB) {
	if ch == nil {
		p.add(path, "is empty")
		return
	}
	switch key := ch.GetHashKey().(type) {
	case *v1alpha3.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		switch name := key.HttpHeaderName; {
		case name == "":
			p.add(path+".httpHeaderName", "must not be empty")
		case strings.ContainsAny(name, "\x00\r\n"):
			// Envoy refuses such a header name, and with it the route
			// configuration that carries the hash policy.
			p.add(path+".httpHeaderName", "must not contain NUL, CR or LF, got %q", name)
		}
	case *v1alpha3.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if key.HttpQueryParameterName == "" {
			p.add(path+".httpQueryParameterName", "must not be empty")
		}
	case *v1alpha3.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		if key.HttpCookie.GetName() == "" {
			p.add(path+".httpCookie.name", "is required")
		}
		if ttl := key.HttpCookie.GetTtl(); ttl != nil {
			if err := ttl.CheckValid(); err != nil || ttl.AsDuration() < 0 {
				p.add(path+".httpCookie.ttl", "must be a non-negative duration")
			}
		}
		seen := map[string]bool{}
		for i, a := range key.HttpCookie.GetAttributes() {
			aPath := fmt.Sprintf("%s.httpCookie.attributes[%d].name", path, i)
			switch name := a.GetName(); {
			case name == "":
				p.add(aPath, "is required")
			case seen[name]:
				p.add(aPath, "duplicate attribute %q", name)
			}
			seen[a.GetName()] = true
		}
	}
	//lint:ignore SA1019 users may still set the deprecated field; it is validated like the rest
	if ch.GetMinimumRingSize() != 0 && ch.GetHashAlgorithm() != nil {
		// Istio refuses the two sizes together rather than pick one.
		p.add(path+".minimumRingSize", "cannot be set with ringHash or maglev; set ringHash.minimumRingSize instead")
	}
	if mg, ok := ch.GetHashAlgorithm().(*v1alpha3.LoadBalancerSettings_ConsistentHashLB_Maglev); ok {
		switch size := mg.Maglev.GetTableSize(); {
		case size == 0:
			p.add(path+".maglev.tableSize", "is required")
		case size >= maxMaglevTableSize:
			p.add(path+".maglev.tableSize", "must be less than %d, got %d", maxMaglevTableSize, size)
		case size != 1 && !new(big.Int).SetUint64(size).ProbablyPrime(20):
			// Envoy's primality test, which Istio copies, passes 1.
			p.add(path+".maglev.tableSize", "must be a prime number, got %d", size)
		}
	}
}

// The node labels of a proxy's locality. Locality failover and zone-aware
// load balancing order endpoints by them themselves, so Istio refuses them
// where they would compete with failoverPriority.
var topologyLabels = []string{"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "topology.istio.io/subzone"}

func (p *problems) localityLB(path string, l *v1alpha3.LocalityLoadBalancerSetting) {
	if l == nil {
		return
	}
	if len(l.GetDistribute()) > 0 && len(l.GetFailover()) > 0 {
		p.add(path, "only one of distribute and failover may be set")
	}
	// The rule's distribute entries are matched in order, so a later
	// entry that an earlier one covers is refused; the destinations of one
	// entry share its weight, so none may cover another.
	fromSeen := localitySet{}
	for i, d := range l.GetDistribute() {
		dPath := fmt.Sprintf("%s.distribute[%d]", path, i)
		if d.GetFrom() == "" {
			p.add(dPath+".from", "is required")
		} else if msg := fromSeen.add(d.GetFrom()); msg != "" {
			p.add(dPath+".from", "%q: %s", d.GetFrom(), msg)
		}
		var sum uint64
		toSeen := localitySet{}
		// Istio walks the map in no particular order; sorted, the verdict
		// is the same on every run.
		for _, loc := range sortedKeys(d.GetTo()) {
			w := d.GetTo()[loc]
			if w < 1 || w > 100 {
				p.add(dPath+".to["+loc+"]", "weight must be in 1..100, got %d", w)
			}
			sum += uint64(w)
			if msg := toSeen.add(loc); msg != "" {
				p.add(dPath+".to["+loc+"]", "%q: %s", loc, msg)
			}
		}
		if sum != 100 {
			p.add(dPath+".to", "weights must sum to 100, got %d", sum)
		}
	}
	if len(l.GetFailover()) > 0 {
		for i, label := range l.GetFailoverPriority() {
			if slices.Contains(topologyLabels, label) {
				p.add(fmt.Sprintf("%s.failoverPriority[%d]", path, i), "%q cannot be used with failover, which orders regions itself", label)
			}
		}
	}
	for i, f := range l.GetFailover() {
		fPath := fmt.Sprintf("%s.failover[%d]", path, i)
		if f.GetFrom() == "" || f.GetTo() == "" {
			p.add(fPath, "from and to are required")
			continue
		}
		p.failover(fPath, f.GetFrom(), f.GetTo())
	}
}

// zoneAwareLB checks zoneAwareLbSetting, which Istio validates like the
// failover of localityLbSetting.
func (p *problems) zoneAwareLB(path string, z *v1alpha3.ZoneAwareLoadBalancerSetting) {
	if z == nil {
		return
	}
	for i, label := range z.GetFailoverPriority() {
		if slices.Contains(topologyLabels, label) {
			p.add(fmt.Sprintf("%s.failoverPriority[%d]", path, i), "%q cannot be used in zoneAwareLbSetting, which routes by region, zone and subzone itself", label)
		}
	}
	for i, f := range z.GetFailover() {
		p.failover(fmt.Sprintf("%s.failover[%d]", path, i), f.GetFrom(), f.GetTo())
	}
}

// failover checks one failover entry: from one region to another, each
// named alone (zones fail over within their region by themselves).
func (p *problems) failover(path, from, to string) {
	if from == to {
		p.add(path, "from and to must differ")
	}
	if strings.Contains(from, "/") || strings.Contains(to, "/") {
		p.add(path, `from and to name regions, without "/"`)
	}
	if strings.Contains(from, "*") || strings.Contains(to, "*") {
		p.add(path, `from and to must not contain "*"`)
	}
}

// localitySet holds the localities of a list seen so far, as Istio keeps
// them to find overlaps: region -> zone -> subzone, where a "*" zone or
// subzone stands for all of them. A region alone is kept as zone "*"
// (subzone "*"), and a zone alone as subzone "*"; "r/*" is kept as zone
// "*" too, so it covers what a later entry names in r.
type localitySet map[string]map[string]map[string]bool

// add checks locality (region, region/zone or region/zone/subzone, whose
// last part may end in "*") and adds it; it returns what is wrong with it
// ("" if nothing), which leaves the set as it was.
func (s localitySet) add(locality string) string {
	if n := strings.Count(locality, "*"); n > 1 || n == 1 && !strings.HasSuffix(locality, "*") {
		return `a "*" may only end a locality`
	}
	const overlaps = "overlaps an earlier locality of the list"
	if s["*"] != nil {
		return overlaps
	}
	parts := strings.SplitN(locality, "/", 3)
	if slices.Contains(parts, "") {
		return "a region, zone or subzone is empty"
	}
	region := parts[0]
	zones := s[region]
	switch len(parts) {
	case 1:
		if zones != nil {
			return overlaps
		}
		s[region] = map[string]map[string]bool{"*": {"*": true}}
	case 2:
		zone := parts[1]
		switch {
		case zones == nil:
			s[region] = map[string]map[string]bool{zone: {"*": true}}
		case zones["*"] != nil || zones[zone] != nil:
			return overlaps
		default:
			zones[zone] = map[string]bool{"*": true}
		}
	default:
		zone, subzone := parts[1], parts[2]
		switch {
		case zones == nil:
			s[region] = map[string]map[string]bool{zone: {subzone: true}}
		case zones["*"] != nil:
			return overlaps
		case zones[zone] == nil:
			zones[zone] = map[string]bool{subzone: true}
		case zones[zone]["*"] || zones[zone][subzone]:
			return overlaps
		default:
			zones[zone][subzone] = true
		}
	}
	return ""
}

func (p *problems) connectionPool(path string, cp *v1alpha3.ConnectionPoolSettings) {
	if cp == nil {
		return
	}
	if cp.GetTcp() == nil && cp.GetHttp() == nil {
		p.add(path, "must set tcp or http settings")
	}
	if tcp := cp.GetTcp(); tcp != nil {
		p.checkNonNegative(path+".tcp.maxConnections", tcp.GetMaxConnections())
		p.checkMillis(path+".tcp.connectTimeout", tcp.GetConnectTimeout())
		p.checkMillis(path+".tcp.maxConnectionDuration", tcp.GetMaxConnectionDuration())
		// 0s turns the TCP idle timeout off (Istio's documented use), so
		// only a non-zero value must be a valid duration.
		if it := tcp.GetIdleTimeout(); it.GetSeconds() != 0 || it.GetNanos() != 0 {
			p.checkMillis(path+".tcp.idleTimeout", it)
		}
		if ka := tcp.GetTcpKeepalive(); ka != nil {
			p.checkMillis(path+".tcp.tcpKeepalive.time", ka.GetTime())
			p.checkMillis(path+".tcp.tcpKeepalive.interval", ka.GetInterval())
		}
	}
	if h := cp.GetHttp(); h != nil {
		p.checkNonNegative(path+".http.http1MaxPendingRequests", h.GetHttp1MaxPendingRequests())
		p.checkNonNegative(path+".http.http2MaxRequests", h.GetHttp2MaxRequests())
		p.checkNonNegative(path+".http.maxRetries", h.GetMaxRetries())
		p.checkNonNegative(path+".http.maxConcurrentStreams", h.GetMaxConcurrentStreams())
		// Any count is fine (Envoy takes a uint32); the 2^29 in Istio's
		// documentation is how far the default, unlimited, goes.
		p.checkNonNegative(path+".http.maxRequestsPerConnection", h.GetMaxRequestsPerConnection())
		p.checkMillis(path+".http.idleTimeout", h.GetIdleTimeout())
		if _, ok := v1alpha3.ConnectionPoolSettings_HTTPSettings_H2UpgradePolicy_name[int32(h.GetH2UpgradePolicy())]; !ok {
			p.add(path+".http.h2UpgradePolicy", "unknown policy %d", h.GetH2UpgradePolicy())
		}
		// UPGRADE makes every upstream connection HTTP/2, which
		// useClientProtocol would contradict; Istio refuses both.
		if h.GetH2UpgradePolicy() == v1alpha3.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.GetUseClientProtocol() {
			p.add(path+".http.useClientProtocol", "cannot be true when h2UpgradePolicy is UPGRADE")
		}
		if ka := h.GetHttp2KeepAlive(); ka != nil {
			// Istio requires both: a ping needs an interval, and a
			// deadline for its answer.
			for _, d := range []struct {
				name string
				d    *durationpb.Duration
			}{{"interval", ka.GetInterval()}, {"timeout", ka.GetTimeout()}} {
				if d.d == nil {
					p.add(path+".http.http2KeepAlive."+d.name, "is required")
				}
				p.checkMillis(path+".http.http2KeepAlive."+d.name, d.d)
			}
		}
	}
}

func (p *problems) outlierDetection(path string, od *v1alpha3.OutlierDetection) {
	if od == nil {
		return
	}
	//lint:ignore SA1019 users may still set the deprecated field; it is validated like the rest
	p.checkNonNegative(path+".consecutiveErrors", od.GetConsecutiveErrors())
	// Envoy counts local-origin failures apart only when told to split
	// them; otherwise the threshold would silently do nothing.
	if od.GetConsecutiveLocalOriginFailures().GetValue() > 0 && !od.GetSplitExternalLocalOriginErrors() {
		p.add(path+".consecutiveLocalOriginFailures", "counts only with splitExternalLocalOriginErrors: true")
	}
	p.checkMillis(path+".interval", od.GetInterval())
	p.checkMillis(path+".baseEjectionTime", od.GetBaseEjectionTime())
	p.checkPercent(path+".maxEjectionPercent", float64(od.GetMaxEjectionPercent()))
	p.checkPercent(path+".minHealthPercent", float64(od.GetMinHealthPercent()))
	if f := od.GetFailurePercentageThreshold(); f != nil {
		p.checkPercent(path+".failurePercentageThreshold", float64(f.GetValue()))
	}
	for i, code := range od.GetOutlierDetectionHttpErrorCodes() {
		if code < 100 || code > 599 {
			p.add(fmt.Sprintf("%s.outlierDetectionHttpErrorCodes[%d]", path, i), "not an HTTP status code: %d", code)
		}
	}
}

// tls checks client TLS settings of a rule in namespace. What a mode does
// not use (certificates for DISABLE and ISTIO_MUTUAL, which presents the
// workload's own; a client certificate for SIMPLE) is ignored, as Istio
// ignores it, rather than refused.
func (p *problems) tls(path, namespace string, tls *v1alpha3.ClientTLSSettings) {
	if tls == nil {
		return
	}
	mode := tls.GetMode()
	switch mode {
	case v1alpha3.ClientTLSSettings_DISABLE, v1alpha3.ClientTLSSettings_ISTIO_MUTUAL:
	case v1alpha3.ClientTLSSettings_SIMPLE, v1alpha3.ClientTLSSettings_MUTUAL:
		if tls.GetCredentialName() != "" {
			// The credential is the client certificate and the CA (and
			// its CRL) both; files beside it would be ignored.
			var files []string
			for _, f := range []struct{ name, value string }{
				{"clientCertificate", tls.GetClientCertificate()},
				{"privateKey", tls.GetPrivateKey()},
				{"caCertificates", tls.GetCaCertificates()},
				{"caCrl", tls.GetCaCrl()},
			} {
				if f.value != "" {
					files = append(files, f.name)
				}
			}
			if len(files) > 0 {
				p.add(path, "credentialName is mutually exclusive with %s", strings.Join(files, ", "))
			}
		} else if mode == v1alpha3.ClientTLSSettings_MUTUAL {
			if tls.GetClientCertificate() == "" {
				p.add(path+".clientCertificate", "mode MUTUAL needs credentialName or clientCertificate and privateKey")
			}
			if tls.GetPrivateKey() == "" {
				p.add(path+".privateKey", "mode MUTUAL needs credentialName or clientCertificate and privateKey")
			}
		}
		if tls.GetInsecureSkipVerify().GetValue() {
			// What would verify the server contradicts skipping it. For
			// MUTUAL, credentialName may only be the client certificate,
			// so Istio lets it stand.
			var verifiers []string
			if tls.GetCaCertificates() != "" {
				verifiers = append(verifiers, "caCertificates")
			}
			if mode == v1alpha3.ClientTLSSettings_SIMPLE && tls.GetCredentialName() != "" {
				verifiers = append(verifiers, "credentialName")
			}
			if len(tls.GetSubjectAltNames()) > 0 {
				verifiers = append(verifiers, "subjectAltNames")
			}
			if len(verifiers) > 0 {
				p.add(path+".insecureSkipVerify", "cannot skip verification while also setting %s", strings.Join(verifiers, ", "))
			}
		}
	default:
		p.add(path+".mode", "unknown TLS mode %d", mode)
	}
	// Istio reads a ConfigMap credential only from the rule's own
	// namespace, and only when the name says which.
	if rest, ok := strings.CutPrefix(tls.GetCredentialName(), "configmap://"); ok {
		switch ns, name, _ := strings.Cut(rest, "/"); {
		case ns == "" || name == "":
			p.add(path+".credentialName", "want configmap://<namespace>/<name>, got %q", tls.GetCredentialName())
		case ns != namespace:
			p.add(path+".credentialName", "a configmap:// credential must be in the rule's own namespace %q, not %q", namespace, ns)
		}
	}
}

func (p *problems) tunnel(path string, t *v1alpha3.TrafficPolicy_TunnelSettings) {
	if t == nil {
		return
	}
	switch t.GetProtocol() {
	case "", "CONNECT", "POST":
	default:
		p.add(path+".protocol", "must be CONNECT or POST, got %q", t.GetProtocol())
	}
	switch host := t.GetTargetHost(); {
	case host == "":
		p.add(path+".targetHost", "is required")
	case isIP(host):
	default:
		if msg := dnsNameProblem(host); msg != "" {
			p.add(path+".targetHost", "must be a DNS name or an IP address, got %q: %s", host, msg)
		}
	}
	p.checkPort(path+".targetPort", t.GetTargetPort())
}
