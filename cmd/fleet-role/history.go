package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/api"
)

func newHistoryCommand() *cobra.Command {
	return newStatusViewCommand("history [-o wide|json|yaml]",
		"List the last swaps that ended, how each ended and how long it took",
		fmt.Sprintf(`history lists the last %d swaps that ended, the newest first, as the
controller keeps them in the fleet-role-status ConfigMap: which voter went
out and which standby came in (and whether the voter out was dead), why
and for whom (and the refusals a manual one was started past: its
--override pause, holds or domains), how it ended, how long it took, and what its leadership
move and member removal cost the cluster's writes (the longest gap
between the controller's own writes, and how many failed). -o wide adds
each step and how long it lasted; -o json and -o yaml print the results
themselves.`, api.HistoryLength),
		`  # The last swaps, each step and how long it took
  fleet-role history -o wide

  # How the last swap ended, for a script
  fleet-role history -o json | jq '.[0].result'`,
		func(st api.Status) any {
			if st.History == nil {
				return []api.SwapResult{}
			}
			return st.History
		},
		func(w io.Writer, st api.Status, wide bool) { renderHistory(w, st.History, wide) })
}

// newStatusViewCommand is a command that reads the status the controller
// publishes and shows a part of it: as a table (-o wide: a wider one), or
// the part itself as JSON or YAML.
func newStatusViewCommand(use, short, long, example string, part func(api.Status) any, table func(w io.Writer, st api.Status, wide bool)) *cobra.Command {
	var o clusterOptions
	var output string
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "", "wide", "json", "yaml":
			default:
				return usageError{fmt.Errorf("-o %q: want wide, json or yaml", output)}
			}
			cfg, client, err := o.open()
			if err != nil {
				return err
			}
			st, err := readStatus(cmd.Context(), client, cfg.Namespace)
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				return encode(cmd.OutOrStdout(), output, part(st))
			}
			table(cmd.OutOrStdout(), st, output == "wide")
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "wide, json or yaml (default: the table)")
	completeOutput(cmd, "wide", "json", "yaml")
	o.add(cmd)
	return cmd
}

// renderHistory writes the swaps that ended as a table; wide adds a line
// of each one's steps and their durations.
func renderHistory(w io.Writer, history []api.SwapResult, wide bool) {
	if len(history) == 0 {
		fmt.Fprintln(w, "No swap has ended yet.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SWAP\tOUT\tIN\tASKED\tRESULT\tSTARTED\tTOOK\tWRITE GAP\tREASON")
	for _, r := range history {
		asked := r.Origin
		if r.By != "" {
			asked += " by " + r.By
		}
		if r.Dead {
			asked += ", OUT dead"
		}
		if len(r.Overrides) > 0 {
			asked += ", started past: " + strings.Join(r.Overrides, ", ")
		}
		reason := r.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Out, r.In, asked, r.Result, clock(r.StartedAt),
			r.EndedAt.Sub(r.StartedAt).Round(time.Second), writeGap(r.Writes), reason)
		if wide && len(r.Steps) > 0 {
			var steps []string
			for _, s := range r.Steps {
				steps = append(steps, fmt.Sprintf("%s %s", s.Step, s.End.Sub(s.Start).Round(time.Second)))
			}
			fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t  %s\n", strings.Join(steps, ", "))
		}
	}
	tw.Flush()
}

// writeGap is a swap's longest write gap and its failed writes: "-" when
// it did not reach the leadership move.
func writeGap(w *api.WriteCost) string {
	if w == nil {
		return "-"
	}
	gap := time.Duration(w.LongestGap).Round(time.Millisecond).String()
	if w.Failed > 0 {
		gap += fmt.Sprintf(" (%d of %d failed)", w.Failed, w.Writes)
	}
	return gap
}
