package pushcontext

import (
	"crypto/tls"
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// secretVerdict is whether one Secret object can serve TLS. problem is ""
// when it can.
type secretVerdict struct {
	secret  *model.Secret
	problem string
}

// secretChecker parses each Secret object once, however many Ingresses use
// it, and carries verdicts across builds: parsing a key pair costs far more
// than the rest of an Ingress's translation. A changed Secret is a new
// object, so a verdict is reused only for the very object it was made for.
type secretChecker struct {
	store model.Store
	prev  map[model.NamespacedName]secretVerdict
	cur   map[model.NamespacedName]secretVerdict
}

func newSecretChecker(store model.Store, prev map[model.NamespacedName]secretVerdict) *secretChecker {
	return &secretChecker{store: store, prev: prev, cur: map[model.NamespacedName]secretVerdict{}}
}

func (c *secretChecker) check(name model.NamespacedName) secretVerdict {
	if v, ok := c.cur[name]; ok {
		return v
	}
	sec := c.store.Secret(name)
	v, ok := c.prev[name]
	if !ok || v.secret != sec {
		v = secretVerdict{secret: sec, problem: secretProblem(sec)}
	}
	c.cur[name] = v
	return v
}

// carry keeps the previous verdict for a Secret that is known not to have
// changed, without reading the store.
func (c *secretChecker) carry(name model.NamespacedName) {
	if _, ok := c.cur[name]; ok {
		return
	}
	if v, ok := c.prev[name]; ok {
		c.cur[name] = v
		return
	}
	c.check(name)
}

func secretProblem(sec *model.Secret) string {
	switch {
	case sec == nil:
		return "not found"
	case len(sec.Cert) == 0 || len(sec.PrivateKey) == 0:
		return "has no certificate or no private key (tls.crt, tls.key)"
	}
	if _, err := tls.X509KeyPair(sec.Cert, sec.PrivateKey); err != nil {
		return "does not hold a valid certificate and key: " + err.Error()
	}
	return ""
}

// translateTLS keeps the spec.tls entries whose Secret is usable; each
// other entry is dropped alone, with its reason.
func (tr *ingressTranslator) translateTLS(t *ingressTranslation) {
	for _, entry := range t.ingress.TLS {
		hosts := tlsHosts(entry.Hosts, t.hosts)
		if entry.SecretName == "" {
			t.problems = append(t.problems, "TLS for "+describeHosts(hosts)+": no secretName; TLS entry dropped")
			continue
		}
		name := model.NamespacedName{Namespace: t.key.Namespace, Name: entry.SecretName}
		v := tr.secrets.check(name)
		t.addSecretDep(name, v.secret)
		if v.problem != "" {
			t.problems = append(t.problems, "TLS for "+describeHosts(hosts)+": secret "+name.String()+" "+v.problem+"; TLS entry dropped")
			continue
		}
		t.tls = append(t.tls, tlsCandidate{hosts: hosts, secret: name})
	}
}

func (t *ingressTranslation) addSecretDep(name model.NamespacedName, sec *model.Secret) {
	for _, d := range t.secrets {
		if d.name == name {
			return
		}
	}
	t.secrets = append(t.secrets, secretDep{name: name, secret: sec})
}

// tlsHosts is a TLS entry's hosts, lower-cased, sorted and deduplicated:
// its own, else the Ingress's rule hosts, else any host.
func tlsHosts(declared, ruleHosts []string) []string {
	var hosts []string
	switch {
	case len(declared) > 0:
		hosts = make([]string, 0, len(declared))
		for _, h := range declared {
			if h == "" {
				h = anyHost
			}
			// Lower case, as rule hosts are, so that a host is claimed once
			// whatever its spelling.
			hosts = append(hosts, strings.ToLower(h))
		}
	case len(ruleHosts) > 0:
		hosts = slices.Clone(ruleHosts)
	default:
		return []string{anyHost}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

func describeHosts(hosts []string) string {
	return "hosts " + strings.Join(hosts, ", ")
}
