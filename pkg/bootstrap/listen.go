package bootstrap

import (
	"errors"
	"fmt"
	"net"
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

// namedListenError appends the flag to a failed listen, for listeners that
// another package opens (the webhooks'); other errors pass unchanged.
func namedListenError(err error, flag string) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "listen" {
		return fmt.Errorf("%w (set by %s)", err, flag)
	}
	return err
}
