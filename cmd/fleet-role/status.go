package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func newStatusCommand() *cobra.Command {
	var configFile, kubeconfig string
	var watch bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "status [--watch]",
		Short: "Show where the swap stands, the verdicts and the membership each voter lists",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := controllerConfig(configFile)
			if err != nil {
				return err
			}
			client, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for {
				st, err := readStatus(cmd.Context(), client, cfg.Namespace)
				if err != nil && !watch {
					return err
				}
				var b strings.Builder
				if err != nil {
					fmt.Fprintf(&b, "fleet-role status: %v\n", err)
				} else {
					renderStatus(&b, st, time.Now())
				}
				if watch {
					io.WriteString(out, "\033[H\033[2J") // redraw in place
				}
				io.WriteString(out, b.String())
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
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh in place")
	cmd.Flags().DurationVar(&every, "interval", 2*time.Second, "how often --watch refreshes")
	clusterFlags(cmd, &configFile, &kubeconfig)
	return cmd
}

func readStatus(ctx context.Context, client kubernetes.Interface, ns string) (api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return api.Status{}, fmt.Errorf("no %s/%s: is the controller running?", ns, api.StatusConfigMap)
	}
	if err != nil {
		return api.Status{}, fmt.Errorf("read %s/%s: %w", ns, api.StatusConfigMap, err)
	}
	var st api.Status
	if v := cm.Data[api.StatusKey]; v != "" {
		if err := json.Unmarshal([]byte(v), &st); err != nil {
			return st, fmt.Errorf("%s/%s: %s: %w", ns, api.StatusConfigMap, api.StatusKey, err)
		}
	}
	if v := cm.Data[api.RequestKey]; v != "" && st.Request == nil {
		var q api.ManualRequest
		if json.Unmarshal([]byte(v), &q) == nil {
			st.Request = &q
		}
	}
	return st, nil
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// renderStatus writes the status as a person reads it at a glance.
func renderStatus(w io.Writer, st api.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	if !st.UpdatedAt.IsZero() {
		row("UPDATED", "%s (%s)", clock(st.UpdatedAt), ago(now, st.UpdatedAt))
	}
	if s := st.Swap; s != nil {
		phase := ""
		if s.Phase != "" {
			phase = ", " + s.Phase
		}
		row("SWAP", "%s: %s out, %s in (%s%s), started %s (%s)", s.ID, s.Out, s.In, s.Origin, phase, clock(s.StartedAt), ago(now, s.StartedAt))
		step := st.Step
		if st.Since != nil {
			step += fmt.Sprintf(", since %s (%s", clock(*st.Since), ago(now, *st.Since))
			if st.Bound > 0 {
				step += fmt.Sprintf("; bound %s", time.Duration(st.Bound))
			}
			step += ")"
		}
		row("STEP", "%s", step)
		if x := s.Stuck; x != nil {
			row("STUCK", "the member %s of the candidate %s cannot be removed by fleet-role: %s", x.Member, x.Node, x.Why)
			row("TO REMOVE IT", "as root on the voter %s (etcdctl of etcd's release, k3s ships none):", x.Voter)
			row("", "%s", x.Command())
			row("", "the Lease stays held until the member is gone; then the rollback goes on by itself")
		}
	} else {
		row("SWAP", "none under way")
	}
	if st.Reason != "" {
		row("REASON", "%s", st.Reason)
	}
	if d := st.Decision; d != nil {
		row("DECISION", "swap %s for %s: %s", d.Out, d.In, d.Reason)
	}
	if q := st.Request; q != nil {
		row("REQUEST", "swap %s for %s, by %s at %s", q.Out, q.In, q.By, clock(q.At))
	}
	if a := st.LastAction; a != nil {
		res := "ok"
		if a.Error != "" {
			res = "error: " + a.Error
		}
		row("LAST ACTION", "%s %s at %s (%s): %s", a.Type, a.Node, clock(a.At), ago(now, a.At), res)
	}
	if l := st.Last; l != nil {
		row("LAST SWAP", "%s: %s out, %s in, %s at %s", l.ID, l.Out, l.In, l.Result, clock(l.EndedAt))
	}
	if c := st.CooldownUntil; c != nil && c.After(now) {
		row("COOLDOWN", "until %s", clock(*c))
	}
	if len(st.Pending) > 0 {
		row("PENDING", "%s (left to node recovery)", strings.Join(st.Pending, " "))
	}
	for _, p := range st.Problems {
		row("PROBLEM", "%s", p)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tVERDICT\tSAMPLES\tFSYNC P99\tREAD\tMEMBERS IT LISTS")
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
			if v.FsyncP99Ms > 0 {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", kind, verdict, samples, fsync, read, members)
	}
	tw.Flush()
}
