package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/api"
)

func newMembersCommand() *cobra.Command {
	return newStatusViewCommand("members [-o wide|json|yaml]",
		"List the etcd members as the agents' last samples see them",
		`members lists each voter's etcd member, and the candidate's while it
joins, as its host's agent last sampled it and the controller published
it: its ID and name, voter or learner, the leader, its raft index and how
far it trails the leader's, its database's size and the part in use, its
host's fsync p99, and its alarms. -o wide adds the raft term and the
leader each follows; -o json and -o yaml print the samples themselves.`,
		`  # Each voter's etcd member, its raft index and database size
  fleet-role members

  # With the raft term and the leader each member follows
  fleet-role members -o wide`,
		func(st api.Status) any {
			if st.Etcd == nil {
				return map[string]api.EtcdStatus{}
			}
			return st.Etcd
		},
		renderMembers)
}

// leaderOf is the host whose member leads, as most members say; "" when
// none says.
func leaderOf(etcd map[string]api.EtcdStatus) string {
	votes := map[string]int{}
	for _, e := range etcd {
		if e.Leader != "" && e.Leader != "0" {
			votes[e.Leader]++
		}
	}
	var id string
	for _, l := range slices.Sorted(maps.Keys(votes)) {
		if id == "" || votes[l] > votes[id] {
			id = l
		}
	}
	for host, e := range etcd {
		if e.ID == id {
			return host
		}
	}
	return ""
}

// memberName is the name the member lists give the ID.
func memberName(st api.Status, id string) string {
	for _, voter := range slices.Sorted(maps.Keys(st.Members)) {
		for _, m := range st.Members[voter] {
			if m.ID == id && m.Name != "" {
				return m.Name
			}
		}
	}
	return "-"
}

// renderMembers writes the members as a table.
func renderMembers(w io.Writer, st api.Status, wide bool) {
	if len(st.Etcd) == 0 {
		fmt.Fprintln(w, "No member has been sampled yet.")
		return
	}
	leader := leaderOf(st.Etcd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "HOST\tID\tNAME\tROLE\tLEADER\tRAFT INDEX\tBEHIND\tDB SIZE\tIN USE\tFSYNC P99\tALARMS"
	if wide {
		header += "\tRAFT TERM\tFOLLOWS"
	}
	fmt.Fprintln(tw, header)
	for _, host := range slices.Sorted(maps.Keys(st.Etcd)) {
		e := st.Etcd[host]
		role := "voter"
		if e.Learner {
			role = "learner"
		}
		lead, behind := "", "-"
		if host == leader {
			lead = "*"
		}
		if l, ok := st.Etcd[leader]; ok && l.RaftIndex >= e.RaftIndex {
			behind = fmt.Sprint(l.RaftIndex - e.RaftIndex)
		}
		fsync := "-"
		if v, ok := st.Verdicts[host]; ok && v.Samples > 0 {
			fsync = fmt.Sprintf("%.1f ms", v.FsyncP99Ms)
		}
		alarms := "-"
		if len(e.Errors) > 0 {
			alarms = strings.Join(e.Errors, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", host, e.ID, memberName(st, e.ID), role, lead, e.RaftIndex, behind,
			size(e.DBSize), size(e.DBSizeInUse), fsync, alarms)
		if wide {
			fmt.Fprintf(tw, "\t%d\t%s", e.RaftTerm, e.Leader)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// size writes a number of bytes as a person reads it.
func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
