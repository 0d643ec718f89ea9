package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
)

// The exit codes of swap --wait past 0 (completed), 1 and 2
// (docs/controller-and-cli.md).
const (
	exitRolledBack = 3
	exitAbandoned  = 4
	exitPending    = 5
	exitTimeout    = 6
)

// exitCode is an error that ends the command with its own exit code.
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }
func (e exitCode) Unwrap() error { return e.err }

// waitPoll is how often swap --wait reads the status.
const waitPoll = time.Second

// waitForSwap follows the swap req asked for until it ends, printing each
// change of where it stands: why it waits before it starts, then each
// step. It returns nil when the swap completed, an exitCode by how it
// ended otherwise, or when timeout (0: none) ran out first. A request
// withdrawn (swap --cancel before it started) or replaced is an error.
func waitForSwap(ctx context.Context, w io.Writer, client kubernetes.Interface, ns string, req api.ManualRequest, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var said string
	say := func(format string, a ...any) {
		if s := fmt.Sprintf(format, a...); s != said {
			fmt.Fprintln(w, s)
			said = s
		}
	}
	for {
		st, asked, err := readRequestStatus(ctx, client, ns)
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return exitCode{exitTimeout, fmt.Errorf("--timeout %s ran out: %s; the request stands, follow it with fleet-role status --watch", timeout, said)}
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			// Read again: a controller restarting, an API server
			// changing leader, are no end of the swap.
			say("waiting: %v", err)
		default:
			if r := endOf(st, req); r != nil {
				return swapEnded(w, r)
			}
			switch {
			case st.Swap != nil && st.Swap.RequestAt != nil && st.Swap.RequestAt.Equal(req.At):
				say("swap %s: %s", st.Swap.ID, st.Step)
			case asked == nil:
				return errors.New("the request was withdrawn (fleet-role swap --cancel) before it started a swap")
			case !asked.At.Equal(req.At):
				return fmt.Errorf("the request was replaced by %s's, to swap %s for %s, before it started a swap", asked.By, asked.Out, asked.In)
			case st.Reason != "":
				say("waiting: %s", st.Reason)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(waitPoll):
		}
	}
}

// readRequestStatus reads the status the controller publishes and the
// request as it stands in the ConfigMap (nil: none).
func readRequestStatus(ctx context.Context, client kubernetes.Interface, ns string) (api.Status, *api.ManualRequest, error) {
	cm, st, err := readStatusConfigMap(ctx, client, ns)
	if err != nil {
		return st, nil, err
	}
	var q *api.ManualRequest
	if v, ok := cm.Data[api.RequestKey]; ok && v != "" {
		q = new(api.ManualRequest)
		if err := json.Unmarshal([]byte(v), q); err != nil {
			return st, nil, fmt.Errorf("%s/%s: %s: %w", ns, api.StatusConfigMap, api.RequestKey, err)
		}
	}
	return st, q, nil
}

// endOf is the end of the swap req started, from the last end or the
// history; nil while it has not ended.
func endOf(st api.Status, req api.ManualRequest) *api.SwapResult {
	ends := st.History
	if st.Last != nil {
		ends = append([]api.SwapResult{*st.Last}, ends...)
	}
	for i := range ends {
		if r := &ends[i]; r.RequestAt != nil && r.RequestAt.Equal(req.At) && r.Out == req.Out && r.In == req.In {
			return r
		}
	}
	return nil
}

// swapEnded says how the swap ended; an end but completed is an exitCode
// by its result.
func swapEnded(w io.Writer, r *api.SwapResult) error {
	took := r.EndedAt.Sub(r.StartedAt).Round(time.Second)
	line := fmt.Sprintf("%s: swap %s, %s out, %s in, in %s", r.Result, r.ID, r.Out, r.In, took)
	if r.Reason != "" {
		line += ": " + r.Reason
	}
	if len(r.Pending) > 0 {
		line += fmt.Sprintf(" (unfinished: %s)", strings.Join(r.Pending, ", "))
	}
	fmt.Fprintln(w, line)
	code := exitError
	switch r.Result {
	case api.ResultCompleted:
		return nil
	case api.ResultRolledBack:
		code = exitRolledBack
	case api.ResultAbandoned:
		code = exitAbandoned
	case api.ResultPending:
		code = exitPending
	}
	return exitCode{code, fmt.Errorf("swap %s ended %s, not completed", r.ID, r.Result)}
}
