package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/fleet-role/fleet-role/api/logkey"
)

// logOptions are the flags of the long-running commands' log.
type logOptions struct {
	format, level string
}

func logFlags(cmd *cobra.Command, o *logOptions) {
	cmd.Flags().StringVar(&o.format, "log-format", "text", "text (logfmt) or json, one record a line")
	cmd.Flags().StringVar(&o.level, "log-level", "info", "debug, info, warn or error; debug adds every pass's plan and reason")
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
}

// newLogger is the one logger of the process, with client-go's klog
// routed into it. A format or level it does not know is bad usage.
func newLogger(w io.Writer, o logOptions) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level)}
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch o.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", o.format)}
	}
	log := slog.New(h)
	klog.SetSlogLogger(log.With(logkey.Component, "client-go"))
	return log, nil
}
