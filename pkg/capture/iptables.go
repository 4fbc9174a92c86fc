package capture

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/netns"
)

// IPTables is the backend for nodes that manage their rules with iptables.
// It runs the node's iptables-save and iptables-restore (and the ip6
// variants) inside the pod's namespace, whichever kernel interface those
// binaries use (legacy or nf_tables), so the capture shows up in the same
// tool as the node's other rules.
var IPTables Backend = iptBackend{}

type iptBackend struct{}

func (iptBackend) Name() string { return "iptables" }

// iptChain is one chain the backend owns in the nat table, and the
// built-in chain that jumps to it.
type iptChain struct{ own, hook string }

var (
	iptOutput     = iptChain{own: "MESHPILOT_OUTPUT", hook: "OUTPUT"}
	iptPrerouting = iptChain{own: "MESHPILOT_PREROUTING", hook: "PREROUTING"}
	iptChains     = []iptChain{iptOutput, iptPrerouting}
)

// iptFamily names the save and restore binaries of one address family.
type iptFamily struct{ save, restore string }

var iptFamilies = []iptFamily{{"iptables-save", "iptables-restore"}, {"ip6tables-save", "ip6tables-restore"}}

// Install writes the capture chains and jumps with one iptables-restore per
// family. Declaring a chain that exists empties it, and a jump is added
// only where none is, so each family's capture changes in one atomic
// restore, and installing twice neither duplicates nor drops a rule.
func (iptBackend) Install(path string, p Ports) error {
	return inNamespace(path, "install", func() error {
		for _, fam := range iptFamilies {
			st, err := readNAT(fam)
			if err != nil {
				return err
			}
			if err := restore(fam, installScript(p, st)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Remove deletes every jump to the capture chains, then the chains.
func (iptBackend) Remove(path string) error {
	return inNamespace(path, "remove", func() error {
		for _, fam := range iptFamilies {
			st, err := readNAT(fam)
			if err != nil {
				return err
			}
			if script := removeScript(st); script != "" {
				if err := restore(fam, script); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Installed reports whether both families have both chains and the jumps
// to them.
func (iptBackend) Installed(path string) (bool, error) {
	ok := true
	err := inNamespace(path, "inspect", func() error {
		for _, fam := range iptFamilies {
			st, err := readNAT(fam)
			if err != nil {
				return err
			}
			for _, c := range iptChains {
				ok = ok && st.chains[c.own] && st.jumps[c] > 0
			}
		}
		return nil
	})
	return ok && err == nil, err
}

func inNamespace(path, what string, fn func() error) error {
	// A process started from a thread inside the namespace is created in it:
	// netns.Do keeps this goroutine on that thread while exec forks.
	if err := netns.Do(path, fn); err != nil {
		return fmt.Errorf("capture: iptables %s in %s: %w", what, path, err)
	}
	return nil
}

// natState is what the nat table holds of ours: which of our chains exist,
// and how many jumps lead to each.
type natState struct {
	chains map[string]bool
	jumps  map[iptChain]int
}

func readNAT(fam iptFamily) (natState, error) {
	out, err := run(fam.save, nil, "-t", "nat")
	if err != nil {
		return natState{}, err
	}
	st := natState{chains: map[string]bool{}, jumps: map[iptChain]int{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		for _, c := range iptChains {
			switch {
			case strings.HasPrefix(line, ":"+c.own+" "):
				st.chains[c.own] = true
			case line == jumpRule(c):
				st.jumps[c]++
			}
		}
	}
	return st, sc.Err()
}

func jumpRule(c iptChain) string { return "-A " + c.hook + " -j " + c.own }

// installScript is iptables-restore input (for --noflush) with the same
// rules as the nftables backend, in the same order.
func installScript(p Ports, st natState) string {
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range iptChains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c.own)
	}
	for _, c := range iptChains {
		if st.jumps[c] == 0 {
			b.WriteString(jumpRule(c) + "\n")
		}
	}
	mark := fmt.Sprintf("-m mark --mark %#x -j RETURN", p.Mark)
	out, in := iptOutput.own, iptPrerouting.own
	fmt.Fprintf(&b, "-A %s %s\n", out, mark)
	fmt.Fprintf(&b, "-A %s -o lo -j RETURN\n", out)
	fmt.Fprintf(&b, "-A %s -p tcp -j REDIRECT --to-ports %d\n", out, p.Outbound)
	fmt.Fprintf(&b, "-A %s %s\n", in, mark)
	fmt.Fprintf(&b, "-A %s -i lo -j RETURN\n", in)
	fmt.Fprintf(&b, "-A %s -p tcp --dport %d -j RETURN\n", in, p.HBONE)
	fmt.Fprintf(&b, "-A %s -p tcp -j REDIRECT --to-ports %d\n", in, p.Inbound)
	b.WriteString("COMMIT\n")
	return b.String()
}

// removeScript undoes installScript; empty when there is nothing of ours.
func removeScript(st natState) string {
	var b strings.Builder
	for _, c := range iptChains {
		for range st.jumps[c] {
			fmt.Fprintf(&b, "-D %s -j %s\n", c.hook, c.own)
		}
	}
	for _, c := range iptChains {
		if st.chains[c.own] {
			fmt.Fprintf(&b, "-F %s\n-X %s\n", c.own, c.own)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "*nat\n" + b.String() + "COMMIT\n"
}

func restore(fam iptFamily, script string) error {
	// --wait: the node's other iptables users hold the xtables lock too.
	_, err := run(fam.restore, strings.NewReader(script), "--noflush", "--wait")
	return err
}

func run(name string, stdin *strings.Reader, args ...string) ([]byte, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s not found: the iptables backend needs the iptables package on the node proxy's image: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
