package loadassign

import (
	"strconv"
	"strings"
)

// Cluster identifies the outbound cluster an assignment belongs to. It is a
// comparable value, so cache lookups on the hot path build no name.
type Cluster struct {
	Host   string
	Port   uint32
	Subset string
}

// Name is the cluster's name, as ClusterName spells it.
func (c Cluster) Name() string { return ClusterName(c.Host, c.Port, c.Subset) }

// ClusterName is Istio's outbound cluster name, which is also the name of
// its load assignment: outbound|<port>|<subset>|<host> (subset empty for the
// whole service).
func ClusterName(host string, port uint32, subset string) string {
	var b strings.Builder
	b.Grow(len("outbound|||") + 5 + len(subset) + len(host))
	b.WriteString("outbound|")
	b.WriteString(strconv.FormatUint(uint64(port), 10))
	b.WriteByte('|')
	b.WriteString(subset)
	b.WriteByte('|')
	b.WriteString(host)
	return b.String()
}
