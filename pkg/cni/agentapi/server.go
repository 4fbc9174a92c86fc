package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// readTimeout bounds how long a connection may take to send its request, so
// a stuck client does not hold a goroutine forever. The handler's own time
// is bounded by the client, which closes the connection at its deadline.
const readTimeout = 5 * time.Second

// Listen removes a stale socket left by an earlier agent, creates the
// directory if needed, and listens on path, readable and writable by the
// owner only (the runtime, which runs the plugin, is root).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	// A socket file outlives its process; a new agent must replace it, or
	// every pod on the node would fail to start.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers requests on l with h, one goroutine per connection, until l
// is closed; then it cancels the handlers still running, waits for them,
// and returns nil. Any other accept error is returned.
func Serve(l net.Listener, h Handler) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(ctx, conn, h)
		}()
	}
}

func serveConn(ctx context.Context, conn net.Conn, h Handler) {
	defer conn.Close()
	// The client closing its end (its deadline passed) cancels the handler:
	// the answer would go nowhere.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	conn.SetReadDeadline(time.Now().Add(readTimeout))
	var req Request
	dec := json.NewDecoder(conn)
	if err := dec.Decode(&req); err != nil {
		slog.Warn("cni agent: unreadable request", "err", err)
		writeResponse(conn, Response{Error: "unreadable request: " + err.Error()})
		return
	}
	if err := validate(req); err != nil {
		writeResponse(conn, Response{Error: err.Error()})
		return
	}
	conn.SetReadDeadline(time.Time{})
	go func() {
		// A request is exactly one JSON value; anything further, including
		// EOF, means the client is gone or misbehaving.
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			cancel()
		}
	}()

	resp := Response{OK: true}
	if err := h.HandleCNI(ctx, req); err != nil {
		resp = Response{Error: err.Error()}
	}
	writeResponse(conn, resp)
}

func validate(req Request) error {
	switch req.Command {
	case CommandAdd, CommandDel, CommandCheck:
	default:
		return fmt.Errorf("unknown command %q", req.Command)
	}
	if req.PodNamespace == "" || req.PodName == "" {
		return errors.New("podNamespace and podName are required")
	}
	if req.Command != CommandDel && req.Netns == "" {
		return fmt.Errorf("netns is required for %s", req.Command)
	}
	return nil
}

func writeResponse(conn net.Conn, resp Response) {
	conn.SetWriteDeadline(time.Now().Add(readTimeout))
	if err := json.NewEncoder(conn).Encode(resp); err != nil {
		slog.Debug("cni agent: answer not delivered", "err", err)
	}
}
