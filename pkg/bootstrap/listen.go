package bootstrap

import (
	"errors"
	"fmt"
	"net"

	"github.com/meshpilot/meshpilot/pkg/rawio"
)

// The flags of `pilot discovery` that set each listener. Errors name them:
// "address already in use" alone does not tell an operator which of five
// ports collided, nor how to move it.
const (
	flagXDSAddr        = "--xds-addr"
	flagSecureXDSAddr  = "--secure-xds-addr"
	flagHTTPAddr       = "--http-addr"
	flagMonitoringAddr = "--monitoring-addr"
	flagWebhookAddr    = "--webhook-addr"
)

// listen opens a TCP listener on addr, which flag sets.
func listen(addr, flag string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, namedListenError(err, flag)
	}
	return l, nil
}

// listenXDS opens an xDS listener on addr, which flag sets. Its
// connections read and write with raw system calls (package rawio), which
// spares the Go scheduler's system-call handoffs in a connect storm.
func listenXDS(addr, flag string) (net.Listener, error) {
	l, err := listen(addr, flag)
	if err != nil {
		return nil, err
	}
	return rawio.Listener(l, keepaliveTimeout), nil
}

// namedListenError appends the flag to a failed listen, for listeners that
// another package opens (the webhooks'); other errors pass unchanged.
func namedListenError(err error, flag string) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "listen" {
		return fmt.Errorf("%w (set by %s)", err, flag)
	}
	return err
}
