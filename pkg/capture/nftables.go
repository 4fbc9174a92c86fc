package capture

import (
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Table is the name of the nftables backend's tables (one per address
// family), so that it touches nothing else in the namespace.
const Table = "meshpilot_capture"

// NFTables is the backend that writes nftables tables over netlink
// (github.com/google/nftables), so no nft binary is needed.
var NFTables Backend = nftBackend{}

type nftBackend struct{}

func (nftBackend) Name() string { return "nftables" }

// Install puts the capture rules into the network namespace at path,
// replacing any earlier capture tables there, in one netlink transaction:
// the namespace is never half captured.
func (nftBackend) Install(path string, p Ports) error {
	c, done, err := conn(path)
	if err != nil {
		return err
	}
	defer done()
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		// Deleting a table that is not there fails the whole batch, so an
		// existing one is first emptied by adding it (a no-op) and then
		// flushed and deleted.
		t := c.AddTable(&nftables.Table{Family: fam, Name: Table})
		c.DelTable(t)
		t = c.AddTable(&nftables.Table{Family: fam, Name: Table})
		out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
		in := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		for _, chain := range []*nftables.Chain{out, in} {
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: markReturn(p.Mark)})
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: ifaceReturn(expr.MetaKeyOIFNAME, "lo")})
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: redirectTCP(p.Outbound)})
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: ifaceReturn(expr.MetaKeyIIFNAME, "lo")})
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: portReturn(p.HBONE)})
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: redirectTCP(p.Inbound)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("capture: install in %s: %w", path, err)
	}
	return nil
}

// Remove deletes the capture tables from the namespace at path; removing
// what is not there is not an error (CNI DEL may come twice).
func (nftBackend) Remove(path string) error {
	c, done, err := conn(path)
	if err != nil {
		return err
	}
	defer done()
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		t := c.AddTable(&nftables.Table{Family: fam, Name: Table})
		c.DelTable(t)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("capture: remove from %s: %w", path, err)
	}
	return nil
}

// Installed reports whether the namespace at path holds the capture
// tables for both families, as a node agent checks after a restart.
func (nftBackend) Installed(path string) (bool, error) {
	c, done, err := conn(path)
	if err != nil {
		return false, err
	}
	defer done()
	tables, err := c.ListTables()
	if err != nil {
		return false, fmt.Errorf("capture: list tables in %s: %w", path, err)
	}
	found := 0
	for _, t := range tables {
		if t.Name == Table && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) {
			found++
		}
	}
	return found == 2, nil
}

// conn opens a netlink connection bound to the namespace at path: the
// socket is made there, so no thread switches namespace.
func conn(path string) (*nftables.Conn, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("capture: network namespace: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("capture: netlink in %s: %w", path, err)
	}
	return c, func() { _ = c.CloseLasting(); f.Close() }, nil
}

func markReturn(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
}

func ifaceReturn(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, 16) // interface names compare NUL-padded to IFNAMSIZ
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
}

func portReturn(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
}

func redirectTCP(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
