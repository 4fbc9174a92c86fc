package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// DefaultTimeout bounds one Call when the caller's context has no deadline:
// long enough for the agent to enter a namespace and write its rules, short
// enough that a hung agent does not hold the runtime's pod creation.
const DefaultTimeout = 10 * time.Second

// UnreachableError means the agent could not be reached at all (no socket,
// nobody listening), as opposed to an agent that answered with a refusal.
// The plugin treats the two differently on DEL.
type UnreachableError struct {
	Path string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("node agent unreachable at %s: %v", e.Path, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// RefusedError is an agent's answer of OK false.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "node agent refused: " + e.Reason }

// Call sends req to the agent listening on socketPath and waits for its
// answer. It returns nil only when the agent confirmed; an *UnreachableError
// when the socket could not be dialled; a *RefusedError when the agent said
// no; any other error when the exchange broke or timed out midway.
func Call(ctx context.Context, socketPath string, req Request) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return &UnreachableError{Path: socketPath, Err: err}
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	// Closing the connection is what unblocks a read when ctx is cancelled
	// before the deadline.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fmt.Errorf("send %s to node agent at %s: %w", req.Command, socketPath, err)
	}
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		var ne net.Error
		if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
			return fmt.Errorf("node agent at %s did not answer %s in time: %w", socketPath, req.Command, err)
		}
		return fmt.Errorf("read node agent's answer to %s at %s: %w", req.Command, socketPath, err)
	}
	if !resp.OK {
		reason := resp.Error
		if reason == "" {
			reason = "no reason given"
		}
		return &RefusedError{Reason: reason}
	}
	return nil
}
