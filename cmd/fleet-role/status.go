package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func newStatusCommand() *cobra.Command {
	var o clusterOptions
	var output string
	var watch bool
	var every time.Duration
	cmd := &cobra.Command{
		Use: "status [--watch] [-o wide|json|yaml]",
		Example: `  # Where the swap stands, the verdicts and the membership
  fleet-role status

  # Follow a swap, redrawn in place
  fleet-role status --watch

  # The status document, for a script
  fleet-role status -o json -n fleet-role --context prod`,
		Short: "Show where the swap stands, the verdicts and the membership each voter lists",
		Long: `status reads the status the controller publishes in the fleet-role-status
ConfigMap. -o wide adds each host's score and the reason of its verdict;
-o json and -o yaml print the status document itself (docs/plan-format.md).
--watch redraws in place on a terminal; into a pipe or a file it prints
the status again each time it changes, as plain lines (one document a
change with -o json or yaml).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			render, err := statusRenderer(output)
			if err != nil {
				return err
			}
			cfg, client, err := o.open()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			redraw := watch && isTerminal(out)
			var last []byte
			for {
				st, err := readStatus(cmd.Context(), client, cfg.Namespace)
				if err != nil && !watch {
					return err
				}
				var b bytes.Buffer
				switch {
				case err != nil:
					fmt.Fprintf(&b, "fleet-role status: %v\n", err)
				default:
					if err := render(&b, st, time.Now()); err != nil {
						return err
					}
				}
				// Into a pipe, a refresh that changed nothing but the
				// clock prints nothing.
				seen, _ := json.Marshal(st)
				if err != nil {
					seen = []byte(err.Error())
				}
				switch {
				case redraw:
					io.WriteString(out, "\033[H\033[2J")
					out.Write(b.Bytes())
				case !bytes.Equal(seen, last):
					if watch && last != nil && (output == "" || output == "wide") {
						io.WriteString(out, "\n")
					}
					out.Write(b.Bytes())
				}
				last = seen
				if !watch {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh: in place on a terminal, a new print at each change otherwise")
	cmd.Flags().DurationVar(&every, "interval", 2*time.Second, "how often --watch reads the status")
	cmd.Flags().StringVarP(&output, "output", "o", "", "wide, json or yaml (default: the table)")
	completeOutput(cmd, "wide", "json", "yaml")
	o.add(cmd)
	return cmd
}

// statusRenderer is how -o prints the status.
func statusRenderer(output string) (func(io.Writer, api.Status, time.Time) error, error) {
	switch output {
	case "":
		return func(w io.Writer, st api.Status, now time.Time) error { renderStatus(w, st, now, false); return nil }, nil
	case "wide":
		return func(w io.Writer, st api.Status, now time.Time) error { renderStatus(w, st, now, true); return nil }, nil
	case "json", "yaml":
		return func(w io.Writer, st api.Status, _ time.Time) error { return encode(w, output, st) }, nil
	}
	return nil, usageError{fmt.Errorf("-o %q: want wide, json or yaml", output)}
}

// encode writes v as indented JSON, or as YAML converted from its JSON so
// that both carry the same field names.
func encode(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// isTerminal tells whether w is a terminal, where a redraw in place reads
// well; a pipe or a file gets plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func readStatus(ctx context.Context, client kubernetes.Interface, ns string) (api.Status, error) {
	cm, st, err := readStatusConfigMap(ctx, client, ns)
	if err != nil {
		return st, err
	}
	if v := cm.Data[api.RequestKey]; v != "" && st.Request == nil {
		var q api.ManualRequest
		if json.Unmarshal([]byte(v), &q) == nil {
			st.Request = &q
		}
	}
	return st, nil
}

// readStatusConfigMap reads the fleet-role-status ConfigMap and the
// status the controller published in it.
func readStatusConfigMap(ctx context.Context, client kubernetes.Interface, ns string) (*corev1.ConfigMap, api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var st api.Status
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, st, fmt.Errorf("no %s/%s: is the controller running?", ns, api.StatusConfigMap)
	}
	if err != nil {
		return nil, st, fmt.Errorf("read %s/%s: %w", ns, api.StatusConfigMap, err)
	}
	if v := cm.Data[api.StatusKey]; v != "" {
		if err := json.Unmarshal([]byte(v), &st); err != nil {
			return nil, st, fmt.Errorf("%s/%s: %s: %w", ns, api.StatusConfigMap, api.StatusKey, err)
		}
	}
	return cm, st, nil
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

// pastOverrides says the refusals a swap was started past (its
// overrides): empty for none.
func pastOverrides(overrides []string) string {
	if len(overrides) == 0 {
		return ""
	}
	return "; started past: " + strings.Join(overrides, ", ")
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// renderStatus writes the status as a person reads it at a glance; wide
// adds each host's score and the reason of its verdict.
func renderStatus(w io.Writer, st api.Status, now time.Time, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	if !st.UpdatedAt.IsZero() {
		row("UPDATED", "%s (%s)", clock(st.UpdatedAt), ago(now, st.UpdatedAt))
	}
	if c := st.Controller; c != nil {
		controllerRows(row, c, now)
	} else {
		row("HOLDS", "not known: the controller has written no state of its own yet")
	}
	if s := st.Swap; s != nil {
		phase := ""
		if s.Phase != "" {
			phase = ", " + s.Phase
		}
		row("SWAP", "%s: %s out, %s in (%s%s), started %s (%s)%s", s.ID, s.Out, s.In, s.Origin, phase, clock(s.StartedAt), ago(now, s.StartedAt), pastOverrides(s.Overrides))
		step := st.Step
		if st.Since != nil {
			step += fmt.Sprintf(", since %s (%s", clock(*st.Since), ago(now, *st.Since))
			if st.Bound > 0 {
				step += fmt.Sprintf("; bound %s", time.Duration(st.Bound))
			}
			step += ")"
		}
		row("STEP", "%s", step)
		if len(st.WaitingOn) > 0 {
			pods := make([]string, len(st.WaitingOn))
			for i, p := range st.WaitingOn {
				pods[i] = p
				if j, ok := st.Jobs[p]; ok {
					pods[i] += " (" + j + ")"
				}
			}
			row("WAITING ON", "%d runner pod(s), each running a job: %s", len(st.WaitingOn), strings.Join(pods, ", "))
		}
		if line := catchUp(st); line != "" {
			row("CATCH-UP", "%s", line)
		}
		if x := s.Stuck; x != nil {
			row("STUCK", "the member %s of the candidate %s cannot be removed by fleet-role: %s", x.Member, x.Node, x.Why)
			row("TO REMOVE IT", "as root on the voter %s (etcdctl of etcd's release, k3s ships none):", x.Voter)
			row("", "%s", x.Command())
			row("", "the Lease stays held until the member is gone; then the rollback goes on by itself")
		}
	} else {
		row("SWAP", "none under way")
	}
	if c := st.Cancel; c != nil {
		row("CANCEL", "asked by %s at %s (%s)", c.By, clock(c.At), ago(now, c.At))
	}
	if pa := st.Pause; pa != nil {
		row("PAUSED", "by %s at %s (%s): %s; fleet-role resume lifts it", pa.By, clock(pa.At), ago(now, pa.At), pa.Reason)
	}
	if st.Reason != "" {
		row("REASON", "%s", st.Reason)
	}
	if d := st.Decision; d != nil {
		row("DECISION", "swap %s for %s: %s", d.Out, d.In, d.Reason)
	}
	if q := st.Request; q != nil {
		overrides := ""
		if len(q.Overrides) > 0 {
			overrides = ", overrides: " + strings.Join(q.Overrides, ", ")
		}
		row("REQUEST", "swap %s for %s, by %s at %s%s", q.Out, q.In, q.By, clock(q.At), overrides)
	}
	if a := st.LastAction; a != nil {
		res := "ok"
		if a.Error != "" {
			res = "error: " + a.Error
		}
		row("LAST ACTION", "%s at %s (%s): %s", strings.TrimSpace(a.Type+" "+a.Node), clock(a.At), ago(now, a.At), res)
	}
	if l := st.Last; l != nil {
		row("LAST SWAP", "%s: %s out, %s in, %s at %s%s", l.ID, l.Out, l.In, l.Result, clock(l.EndedAt), pastOverrides(l.Overrides))
	}
	if c := st.CooldownUntil; c != nil && c.After(now) {
		row("COOLDOWN", "until %s", clock(*c))
	}
	if d := st.Domains; d != nil {
		row("DOMAINS", "%s", domainsLine(d))
	}
	for _, d := range st.Dead {
		row("DEAD", "%s: %s; etcd tolerates one failure less until it is replaced or its member removed", d.Node, d.Reason)
	}
	for _, u := range st.Unfinished {
		if u.NodeGone {
			row("PENDING", "%s: swap %s ended without it and its Node was deleted, so nothing is kept for its agent: "+
				"its host may still run what it was asked to until an operator stops it", u.Node, u.Swap)
			continue
		}
		row("PENDING", "%s: swap %s ended before its agent reported the finish of its demotion: its step-down and member-gone stay on its Node "+
			"until the agent does, then they are cleared; bring the agent back, or, the host gone for good, delete the Node", u.Node, u.Swap)
	}
	if len(st.Unfinished) == 0 && len(st.Pending) > 0 {
		// A status an earlier controller wrote names the last end's.
		row("PENDING", "%s (named by the last swap's end: see its reason)", strings.Join(st.Pending, " "))
	}
	for _, p := range st.Problems {
		row("PROBLEM", "%s", p)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "HOST\tVERDICT\tSAMPLES\tFSYNC P99\tREAD\tMEMBERS IT LISTS"
	if wide {
		header += "\tSCORE\tREASON"
	}
	fmt.Fprintln(tw, header)
	names := slices.Clone(st.Voters)
	for n := range st.Verdicts {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		v, ok := st.Verdicts[n]
		kind := n
		if !slices.Contains(st.Voters, n) {
			kind = n + " (standby)"
		}
		verdict, samples, fsync, read := "-", "-", "-", "-"
		if ok {
			verdict = v.State
			switch {
			case v.State == api.VerdictPartial:
				samples = "filling"
			case v.Samples > 0:
				samples = fmt.Sprintf("%d bad of %d", v.Bad, v.Samples)
			}
			// Note: the figure the host is judged by: a voter's etcd's own
			// WAL fsync p99 over the window, else the probe's.
			switch {
			case v.WALFsyncP99Ms > 0:
				fsync = fmt.Sprintf("%.1f ms etcd", v.WALFsyncP99Ms)
			case v.FsyncP99Ms > 0:
				fsync = fmt.Sprintf("%.1f ms", v.FsyncP99Ms)
			}
			if v.RTTMs > 0 {
				read = fmt.Sprintf("%.1f ms", v.RTTMs)
			}
		}
		members := "-"
		if ms, ok := st.Members[n]; ok {
			var parts []string
			for _, m := range ms {
				s := m.Name
				switch {
				case s == "":
					s = swapplan.UnstartedLearner
				case m.Learner:
					s += " (learner)"
				}
				parts = append(parts, s)
			}
			members = strings.Join(parts, " ")
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", kind, verdict, samples, fsync, read, members)
		if wide {
			score, reason := "-", "-"
			if ok {
				score = fmt.Sprintf("%.2f", v.Score)
				if v.Reason != "" {
					reason = v.Reason
				}
			}
			line += "\t" + score + "\t" + reason
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// domainsLine says how the voters lie across failure domains.
func domainsLine(d *api.Domains) string {
	if len(d.Unlabelled) > 0 {
		return fmt.Sprintf("not known: the voters %s have no %s label", strings.Join(d.Unlabelled, " "), d.Label)
	}
	var each []string
	for _, name := range slices.Sorted(maps.Keys(d.Voters)) {
		each = append(each, fmt.Sprintf("%s %d", name, d.Voters[name]))
	}
	survives := "of no domain"
	switch {
	case d.Survives == 1:
		survives = "of any one domain"
	case d.Survives > 1:
		survives = fmt.Sprintf("of any %d domains", d.Survives)
	}
	return fmt.Sprintf("the voters span %d of %s (%s); quorum survives the loss %s", d.Span, d.Label, strings.Join(each, ", "), survives)
}

// controllerRows say what governs the controller's decisions: who leads,
// the dry run, the window and the holds.
func controllerRows(row func(k, format string, args ...any), c *api.ControllerState, now time.Time) {
	dry := "off: it carries out its own decisions"
	if c.DryRun {
		dry = "on: its own decisions are only reported; a manual swap is carried out"
	}
	row("CONTROLLER", "%s leads; dry run %s", c.Leader, dry)
	if w := c.Window; w != nil {
		state, change := "closed", "opens"
		if w.Open {
			state, change = "open", "closes"
		}
		next := ""
		if w.Next != nil {
			next = fmt.Sprintf("; %s at %s (in %s)", change, clock(*w.Next), w.Next.Sub(now).Round(time.Second))
		}
		row("WINDOW", "%s (%s)%s", state, w.Spec, next)
	}
	row("HOLDS", "%s", holdsLine(c))
}

// holdsLine says what the holds watch, what is off and why, and what holds
// now: always, so that a fleet whose holds are all off says so.
func holdsLine(c *api.ControllerState) string {
	watching := "watching nothing"
	if len(c.Holds) > 0 {
		watching = "watching " + strings.Join(c.Holds, ", ")
	}
	off := ""
	if len(c.HoldsOff) > 0 {
		off = "; off: " + strings.Join(c.HoldsOff, ", ")
	}
	now := "; nothing holds now"
	if len(c.Held) > 0 {
		now = "; holding now: " + strings.Join(c.Held, "; ")
	}
	return watching + off + now
}

// catchUp says, while the candidate joins, how far its member trails the
// leader's raft index; "" at another step or without both samples.
func catchUp(st api.Status) string {
	if st.Swap == nil || st.Step != api.StepJoin {
		return ""
	}
	in, ok := st.Etcd[st.Swap.In]
	leader := leaderOf(st.Etcd)
	l, led := st.Etcd[leader]
	if !ok || !led {
		return ""
	}
	role := "a voter"
	if in.Learner {
		role = "a learner"
	}
	behind := "caught up"
	if l.RaftIndex > in.RaftIndex {
		behind = fmt.Sprintf("%d behind", l.RaftIndex-in.RaftIndex)
	}
	return fmt.Sprintf("%s, %s, at raft index %d; the leader %s at %d: %s", st.Swap.In, role, in.RaftIndex, leader, l.RaftIndex, behind)
}
