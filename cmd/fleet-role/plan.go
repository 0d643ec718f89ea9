package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

func newPlanCommand() *cobra.Command {
	var file, at, configFile, output string
	var now bool
	cmd := &cobra.Command{
		Use: "plan -f FILE|- [--at TIME|--now]",
		Example: `  # Why does the swap wait? Capture the cluster, then ask
  kubectl get nodes,leases,configmaps,pods -A -o json > cluster.json
  fleet-role plan -f cluster.json -o text

  # The same capture planned an hour later than it was read
  fleet-role plan -f cluster.json --at 2026-11-30T13:00:00Z -o wide

  # From standard input, with the controller's own configuration
  kubectl get nodes,leases,configmaps,pods -A -o json | fleet-role plan -f - --config controller.toml`,
		Short: "Print the next action of a swap for a cluster read from a file (offline)",
		Long: `plan reads a Kubernetes List, as printed by

  kubectl get nodes,leases,configmaps,pods -A -o json

and prints the next action the controller would take, with its reason.
It reads nothing else and changes nothing: ask it why a swap waits.

It plans at the time the List was read, as the List tells it: the newest
renewal of a Lease in it (the kubelets renew theirs every 10 seconds),
Node heartbeat, or status the controller published. So a capture read
an hour later plans as it would have then, its samples as fresh as they
were. --at plans at another time; --now at the current one.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if _, err := time.Parse(time.RFC3339, args[0]); err == nil {
					return usageError{fmt.Errorf("plan: %q is a time: give it as --at %s (--now takes no value)\n\nUsage: %s", args[0], args[0], cmd.UseLine())}
				}
			}
			return usageArgs(cobra.NoArgs)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("-f FILE is required (- for standard input)")}
			}
			switch output {
			case "json", "yaml", "text", "wide":
			default:
				return usageError{fmt.Errorf("-o %q: want json, yaml, text or wide", output)}
			}
			var when time.Time
			switch {
			case at != "" && now:
				return usageError{errors.New("--at and --now: one or the other")}
			case now:
				when = time.Now()
			case at != "":
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return usageError{fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-11-30T08:00:00Z", at)}
				}
				when = t
			}
			cfg := config.DefaultController()
			if configFile != "" {
				c, err := config.LoadController(configFile)
				if err != nil {
					return fmt.Errorf("%s: %w", configFile, err)
				}
				cfg = c
			}
			in, name, err := openInput(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			defer in.Close()
			plan, when, err := planFile(in, cfg, when)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if output == "text" || output == "wide" {
				return writePlanText(cmd.OutOrStdout(), plan, when, output == "wide")
			}
			return encode(cmd.OutOrStdout(), output, plan)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the List to read, - for standard input (required)")
	cmd.Flags().StringVar(&at, "at", "", "the time to plan at, RFC 3339 (default: the time the List was read, as it tells)")
	cmd.Flags().BoolVar(&now, "now", false, "plan at the current time, not the List's")
	cmd.Flags().StringVar(&configFile, "config", "", "the controller configuration (default: the defaults)")
	cmd.Flags().StringVarP(&output, "output", "o", "json", "json, yaml, text, or wide: the text with what the action writes")
	completeOutput(cmd, "json", "yaml", "text", "wide")
	return cmd
}

// maxPlanInput is the most a plan's input may hold. A fleet's Nodes,
// Leases, ConfigMaps and Pods are far less; a file far larger is a wrong
// one, and is refused before it is read whole.
const maxPlanInput = 64 << 20

// errPlanInputSize is the refusal of an input larger than maxPlanInput.
var errPlanInputSize = fmt.Errorf("larger than the %d bytes (64 MiB) a plan's input may be", maxPlanInput)

// openInput opens the plan's input, - for standard input, and reads no
// more of it than maxPlanInput.
func openInput(stdin io.Reader, file string) (io.ReadCloser, string, error) {
	if file == "-" {
		return io.NopCloser(&limitReader{r: stdin, n: maxPlanInput}), "standard input", nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, "", usageError{err}
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > maxPlanInput {
		f.Close()
		return nil, "", usageError{fmt.Errorf("%s: %d bytes, %w", file, fi.Size(), errPlanInputSize)}
	}
	return struct {
		io.Reader
		io.Closer
	}{&limitReader{r: f, n: maxPlanInput}, f}, file, nil
}

// limitReader reads at most n bytes of r and fails past them, where
// io.LimitReader would end quietly in the middle of the document.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errPlanInputSize
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errPlanInputSize
	}
	return n, err
}

// planFile reads the List and plans at now, or at the List's own time
// (captureTime) where now is zero, and says at which; any malformed
// object or annotation is an error, since an operator asking why must see
// what the controller would skip.
func planFile(r io.Reader, cfg config.Controller, now time.Time) (swapplan.Plan, time.Time, error) {
	in, err := adapt.ReadList(r, cfg.Namespace)
	if err != nil {
		return swapplan.Plan{}, now, err
	}
	runners, err := labels.Parse(cfg.RunnerSelector)
	if err != nil {
		return swapplan.Plan{}, now, fmt.Errorf("runner_selector: %w", err)
	}
	if now.IsZero() {
		if now = captureTime(in); now.IsZero() {
			return swapplan.Plan{}, now, fmt.Errorf("%w: it tells no time it was read at (no Lease renewal, Node heartbeat or published status): give --at TIME or --now", adapt.ErrInput)
		}
	}
	snap, err := adapt.Build(in, controller.PlanConfig(cfg), runners, now)
	if err != nil {
		return swapplan.Plan{}, now, fmt.Errorf("%w: %w", adapt.ErrInput, err)
	}
	return swapplan.Next(snap), now, nil
}

// captureTime is the time a List was read, as near as it tells: the
// newest of its Leases' renewals (a kubelet renews its own every 10 s,
// the controller the regrade Lease every pass), its Nodes' Ready
// heartbeats and the status's updatedAt. Zero when it holds none.
func captureTime(in adapt.Input) time.Time {
	var newest time.Time
	seen := func(t time.Time) {
		if t.After(newest) {
			newest = t
		}
	}
	for _, l := range append(slices.Clone(in.NodeLeases), in.Lease) {
		if l != nil && l.Spec.RenewTime != nil {
			seen(l.Spec.RenewTime.Time)
		}
	}
	for _, n := range in.Nodes {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				seen(c.LastHeartbeatTime.Time)
			}
		}
	}
	if in.Status != nil {
		// A status that does not read tells no time; Build says why.
		st, _, _ := adapt.Status(in.Status)
		seen(st.UpdatedAt)
	}
	return newest
}

// writePlanText writes the plan as a person reads it; wide adds what the
// action writes: its request, the role of a clean-up, an end's result.
func writePlanText(w io.Writer, p swapplan.Plan, now time.Time, wide bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "at:      %s\n", now.UTC().Format(time.RFC3339))
	step := p.Step
	if step == "" {
		step = "(no swap under way)"
	}
	if p.Since != nil {
		step += fmt.Sprintf("  since %s (%s ago", p.Since.UTC().Format(time.RFC3339), now.Sub(*p.Since).Round(time.Second))
		if p.Bound > 0 {
			step += fmt.Sprintf(", bound %s", time.Duration(p.Bound))
		}
		step += ")"
	}
	fmt.Fprintf(&b, "step:    %s\n", step)
	action := p.Action.Type
	if p.Action.Node != "" {
		action += " " + p.Action.Node
	}
	if p.RenewLease {
		action += "  (renewing the Lease)"
	}
	fmt.Fprintf(&b, "action:  %s\n", action)
	fmt.Fprintf(&b, "reason:  %s\n", p.Reason)
	if s := p.Swap; s != nil {
		phase := ""
		if s.Phase != "" {
			phase = ", " + s.Phase
		}
		fmt.Fprintf(&b, "swap:    %s: %s out, %s in (%s%s, started %s)\n", s.ID, s.Out, s.In, s.Origin, phase, s.StartedAt.UTC().Format(time.RFC3339))
	}
	if d := p.Decision; d != nil {
		fmt.Fprintf(&b, "decision: swap %s for %s: %s\n", d.Out, d.In, d.Reason)
	}
	fmt.Fprintf(&b, "voters:  %s\n", strings.Join(p.Voters, " "))
	for _, u := range p.Pending {
		gone := ""
		if u.NodeGone {
			gone = ", its Node gone"
		}
		fmt.Fprintf(&b, "unfinished: %s (swap %s%s)\n", u.Node, u.Swap, gone)
	}
	if a := p.Action; wide {
		if a.Request != nil {
			req, err := json.Marshal(a.Request)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "request: %s\n", req)
		}
		if a.Role != "" {
			fmt.Fprintf(&b, "role:    %s\n", a.Role)
		}
		if a.Result != "" {
			fmt.Fprintf(&b, "result:  %s (clearing %s)\n", a.Result, strings.Join(a.Clear, " "))
		}
		if len(a.Pending) > 0 {
			fmt.Fprintf(&b, "pending: %s\n", strings.Join(a.Pending, " "))
		}
		if a.Type == api.ActionClearFinished {
			uncordon := ""
			if a.Uncordon {
				uncordon = ", its cordon lifted first"
			}
			fmt.Fprintf(&b, "clears:  the annotations of swap %s%s\n", a.Swap, uncordon)
		}
		if a.CooldownUntil != nil {
			fmt.Fprintf(&b, "cooldown: until %s\n", a.CooldownUntil.UTC().Format(time.RFC3339))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
