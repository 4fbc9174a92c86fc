package inject

import (
	"context"
	"fmt"

	"github.com/meshpilot/meshpilot/pkg/dirwatch"
)

// Run watches ConfigDir and reloads the configuration after each change
// until ctx is done. A change that does not load is logged and counted, and
// the previous configuration stays in use.
func (h *Handler) Run(ctx context.Context) error {
	if h.opts.ConfigDir == "" {
		<-ctx.Done() // the built-in configuration never changes
		return nil
	}
	err := dirwatch.Watch(ctx, h.opts.ConfigDir, h.reloadLogged, func(err error) {
		h.opts.Logger.Warn("injection config watch error", "dir", h.opts.ConfigDir, "err", err)
	})
	if err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	return nil
}

func (h *Handler) reloadLogged() {
	before := h.config.Load()
	if err := h.Reload(); err != nil {
		h.opts.Logger.Error("injection config not reloaded; keeping the previous one", "dir", h.opts.ConfigDir, "err", err)
		return
	}
	after := h.config.Load()
	if before == nil || before.digest != after.digest {
		h.opts.Logger.Info("injection config loaded", "dir", h.opts.ConfigDir, "digest", fmt.Sprintf("%x", after.digest[:8]))
	}
}
