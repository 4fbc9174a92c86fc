package hbone

import "sync"

// A tunnel's copy buffer starts small and grows only when reads keep filling
// it, as ztunnel's does: an idle stream holds 1 KiB per direction, a bulk
// transfer ends up with 256 KiB reads.
var bufSizes = [...]int{1 << 10, 16 << 10, 256 << 10}

var bufPools [len(bufSizes)]sync.Pool

func init() {
	for i, n := range bufSizes {
		bufPools[i].New = func() any { b := make([]byte, n); return &b }
	}
}

// growBuf is one direction's buffer and how far it has grown.
type growBuf struct {
	b     *[]byte
	level int
	full  int // consecutive reads that filled the buffer
}

func newGrowBuf() *growBuf {
	return &growBuf{b: bufPools[0].Get().(*[]byte)}
}

// fillsToGrow is how many full reads in a row earn a bigger buffer, so that a
// single burst does not pin a large buffer to a chatty but small stream.
const fillsToGrow = 4

// observe records a read of n bytes and grows the buffer when reads keep
// filling it.
func (g *growBuf) observe(n int) {
	if n < len(*g.b) {
		g.full = 0
		return
	}
	g.full++
	if g.full < fillsToGrow || g.level == len(bufSizes)-1 {
		return
	}
	bufPools[g.level].Put(g.b)
	g.level++
	g.b = bufPools[g.level].Get().(*[]byte)
	g.full = 0
}

func (g *growBuf) release() {
	if g.b != nil {
		bufPools[g.level].Put(g.b)
		g.b = nil
	}
}
