package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// send hands one message to the sender goroutine and waits at most
// SendTimeout. On timeout the stream ends; the stuck Send returns once gRPC
// tears the stream down.
func (c *connection) send(f func() error) error {
	timer := time.NewTimer(c.s.opts.SendTimeout)
	defer timer.Stop()
	select {
	case c.sendCh <- f:
	case <-timer.C:
		return c.sendTimedOut()
	}
	select {
	case err := <-c.sendResult:
		if err != nil {
			c.s.metrics.streamErrors.WithLabelValues(reasonSendError).Inc()
		}
		return err
	case <-timer.C:
		return c.sendTimedOut()
	}
}

func (c *connection) sendTimedOut() error {
	c.s.metrics.streamErrors.WithLabelValues(reasonSendTimeout).Inc()
	c.s.metrics.istio.writeTimeouts.Inc()
	c.log.Warn("send timed out; closing the stream", "timeout", c.s.opts.SendTimeout)
	return status.Errorf(codes.DeadlineExceeded, "send timed out after %s", c.s.opts.SendTimeout)
}

func (c *connection) runSender() {
	for {
		select {
		case f := <-c.sendCh:
			start := time.Now()
			err := f()
			c.s.metrics.sent(time.Since(start))
			c.sendResult <- err
		case <-c.done:
			return
		}
	}
}

// serveStream is the life of a stream, for both ADS variants: wait for the
// first push context, then handle requests and queued pushes one at a time.
func serveStream[Req any](ctx context.Context, c *connection, recv func() (Req, error),
	handle func(Req) error, push func(*pushPlan) error,
) error {
	s := c.s
	c.ctx = ctx
	defer func() {
		close(c.done)
		c.endSync()
		s.removeConnection(c)
		if c.proxy != nil {
			c.log.Info("xDS client disconnected")
		}
	}()
	go c.runSender()

	reqs := make(chan Req)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-c.done:
				return
			}
		}
	}()

	if !s.waitReady(ctx) {
		return nil
	}
	for {
		// Once stopped, nothing more is served: select alone would pick at
		// random between the stop and a request or push that is also ready.
		select {
		case <-s.stop:
			return nil
		default:
		}
		select {
		case <-ctx.Done():
			// The stream is over; its receive error says why (gRPC may have
			// ended it itself, e.g. on a request that does not unmarshal).
			for {
				select {
				case err := <-recvErr:
					return c.recvError(ctx, err)
				case <-reqs:
				}
			}
		case <-s.stop:
			return nil
		case err := <-recvErr:
			return c.recvError(ctx, err)
		case req := <-reqs:
			if err := handle(req); err != nil {
				return c.streamError(err)
			}
		case <-c.queue.signal:
			if c.proxy == nil {
				continue
			}
			if plan := c.queue.take(); plan != nil {
				if err := push(plan); err != nil {
					return c.streamError(err)
				}
			}
		}
	}
}

func (c *connection) recvError(ctx context.Context, err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return nil
	case codes.ResourceExhausted:
		// A request over the server's size limit: gRPC has refused it, and
		// the mistake is the client's, not a server failure.
		c.s.metrics.streamErrors.WithLabelValues(reasonInvalidArgument).Inc()
		c.log.Warn("request too large; closing the stream", "err", err)
		return err
	case codes.Internal:
		// gRPC reports a request that does not unmarshal as Internal (and
		// has already sent that status, ending the stream); it is a bad
		// request all the same.
		c.s.metrics.streamErrors.WithLabelValues(reasonInvalidArgument).Inc()
		c.log.Warn("malformed request; closing the stream", "err", err)
		return status.Errorf(codes.InvalidArgument, "malformed request: %v", status.Convert(err).Message())
	}
	if ctx.Err() != nil {
		return nil
	}
	c.s.metrics.streamErrors.WithLabelValues(reasonRecvError).Inc()
	c.s.metrics.istio.internalErrors.Inc()
	c.log.Warn("receive failed", "err", err)
	return err
}

// maxStatusMessage bounds what a status message quotes of a client's input:
// the status travels in an HTTP/2 header, and the log repeats it, so a
// megabyte-long node id must not come back a megabyte long.
const maxStatusMessage = 1 << 10

// clip shortens msg to maxStatusMessage bytes, on a rune boundary, saying
// how long it was.
func clip(msg string) string { return clipReporting(msg, maxStatusMessage, len(msg)) }

// clipReporting shortens msg to max bytes, on a rune boundary, and says
// how long the text was that msg was taken from (total bytes): when that
// is more than msg, it says so even if msg fits.
func clipReporting(msg string, max, total int) string {
	if len(msg) <= max && total <= len(msg) {
		return msg
	}
	cut := min(max, len(msg))
	for cut > 0 && cut < len(msg) && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes in all)", msg[:cut], total)
}

func (c *connection) streamError(err error) error {
	// Both are the client's mistake, as in recvError.
	if code := status.Code(err); code == codes.InvalidArgument || code == codes.ResourceExhausted {
		c.s.metrics.streamErrors.WithLabelValues(reasonInvalidArgument).Inc()
		c.log.Warn("invalid request; closing the stream", "err", err)
	}
	return err
}
