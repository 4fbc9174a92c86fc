package nodeproxy

import (
	"errors"
	"io"
	"net"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/hbone"
)

// halfCloser is a connection whose write side can be closed alone.
type halfCloser interface {
	CloseWrite() error
}

// pipe copies a to b and b to a until both directions end. Each side's end
// of input is passed on as a half-close, so a client that shuts its write
// side still gets the reply; when either copy fails both connections are
// reset (a tunnel's stream, a TCP connection's RST), so neither end waits
// forever nor takes what it read so far for all there was. It returns the
// bytes each way.
func pipe(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func(abort bool) {
		once.Do(func() {
			if abort {
				hbone.Abort(a)
				hbone.Abort(b)
				return
			}
			a.Close()
			b.Close()
		})
	}
	copyHalf := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		var err error
		*n, err = io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			closeBoth(true)
			return
		}
		if hc, ok := dst.(halfCloser); ok {
			if hc.CloseWrite() == nil {
				return
			}
		}
		closeBoth(false)
	}
	wg.Add(2)
	go copyHalf(b, a, &aToB)
	go copyHalf(a, b, &bToA)
	wg.Wait()
	closeBoth(false)
	return aToB, bToA
}
