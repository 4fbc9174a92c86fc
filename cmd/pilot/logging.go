package main

import (
	"fmt"
	"io"
	"log/slog"

	"k8s.io/klog/v2"
)

// newLogger builds the process's logger and sends client-go's klog output
// through it too. klog is process-wide, so this is done once, here: a
// component that redirected it for itself alone would leave every other
// client-go line (reflectors, discovery, warnings) in klog's own text
// format, which breaks a JSON log stream.
func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	handlerOpts := &slog.HandlerOptions{Level: lvl}
	var logger *slog.Logger
	switch format {
	case "text":
		logger = slog.New(slog.NewTextHandler(w, handlerOpts))
	case "json":
		logger = slog.New(slog.NewJSONHandler(w, handlerOpts))
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
	klog.SetSlogLogger(logger)
	return logger, nil
}
