package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller/adapt"
)

// completionTimeout is how long a completion waits on the cluster: a
// shell's tab press is no place to wait for an API server that is away.
const completionTimeout = 5 * time.Second

// namespaces are the cluster's namespaces, for completing -n; none where
// the cluster cannot be read.
func (o *clusterOptions) namespaces() []cobra.Completion {
	client, err := o.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var names []cobra.Completion
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return names
}

// completeSwap completes swap's arguments: the voters for OUT, the
// standbys for IN, each with what the Node says of itself (cordoned, not
// Ready). With --cancel it takes none.
func completeSwap(o *clusterOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if cancel, _ := cmd.Flags().GetBool("cancel"); cancel || len(args) >= 2 {
			return nil, none
		}
		want := api.RoleVoter
		if len(args) == 1 {
			want = api.RoleStandby
		}
		client, err := o.client()
		if err != nil {
			return cobra.AppendActiveHelp(nil, "the cluster cannot be reached: "+err.Error()), none
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: api.LabelRole + "=" + want})
		if err != nil {
			return cobra.AppendActiveHelp(nil, "the Nodes cannot be read: "+err.Error()), none
		}
		var names []cobra.Completion
		for _, n := range list.Items {
			if !strings.HasPrefix(n.Name, toComplete) || slices.Contains(args, n.Name) {
				continue
			}
			// A Node whose annotations cannot be read is still named.
			sn, _ := adapt.Node(&n)
			desc := want
			if sn.Unschedulable {
				desc += ", cordoned"
			}
			if !sn.Ready {
				desc += ", not Ready"
			}
			names = append(names, cobra.CompletionWithDesc(n.Name, desc))
		}
		slices.Sort(names)
		return names, none
	}
}

// completeOutput completes -o with the values a command takes.
func completeOutput(cmd *cobra.Command, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// completeOverrides completes swap --override with the overrides not
// named yet, each with the refusal it passes; after a comma, the rest of
// a comma-separated list.
func completeOverrides(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	named, _ := cmd.Flags().GetStringSlice("override")
	done, last := "", toComplete
	if i := strings.LastIndex(toComplete, ","); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
		named = append(named, strings.Split(toComplete[:i], ",")...)
	}
	var out []cobra.Completion
	for _, o := range api.Overrides() {
		if slices.Contains(named, o) || !strings.HasPrefix(o, last) {
			continue
		}
		out = append(out, cobra.CompletionWithDesc(done+o, overridePasses[o]))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// overridePasses says what each override passes, for its completion.
var overridePasses = map[string]string{
	api.OverridePause:   "start while the controller is paused",
	api.OverrideHolds:   "start while a hold is in force (kured, an upgrade, an alert)",
	api.OverrideDomains: "start though a majority of the voters end in one failure domain",
}
