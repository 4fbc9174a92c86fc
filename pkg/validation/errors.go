package validation

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// problems collects field errors as a validator walks a spec.
type problems struct {
	errs []error
}

func (p *problems) add(path, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (p *problems) err() error {
	return errors.Join(p.errs...)
}

// minDuration is the smallest timeout Envoy accepts as meaningful.
const minDuration = time.Millisecond

// checkDuration requires a set duration to be well formed and at least
// minDuration; an unset one is fine.
func (p *problems) checkDuration(path string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		p.add(path, "invalid duration: %v", err)
		return
	}
	if d.AsDuration() < minDuration {
		p.add(path, "duration must be at least %v, got %v", minDuration, d.AsDuration())
	}
}

func (p *problems) checkNonNegative(path string, v int32) {
	if v < 0 {
		p.add(path, "must not be negative, got %d", v)
	}
}

func (p *problems) checkPercent(path string, v float64) {
	if v < 0 || v > 100 {
		p.add(path, "must be between 0 and 100, got %v", v)
	}
}

func (p *problems) checkPort(path string, port uint32) {
	if port < 1 || port > 65535 {
		p.add(path, "port number must be in 1..65535, got %d", port)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
