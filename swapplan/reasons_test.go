package swapplan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// A voter whose probe says unhealthy with no error of its agent is named
// by its figures: its fsync p99, and its read's time where it has one.
func TestAnUnhealthyVoterWithNoAgentErrorIsNamedByItsFsyncP99AndItsReadOnlyWhenTimed(t *testing.T) {
	for _, c := range []struct {
		name string
		rtt  float64
		want string
	}{
		{"a read timed", 2.5, "waits: v3's probe says unhealthy: fsync p99 14.3 ms, read 2.5 ms"},
		{"no read timed", 0, "waits: v3's probe says unhealthy: fsync p99 14.3 ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.hooks = append(w.hooks, func(w *world) {
				if p := w.node("v3").Probe; p != nil && p.Healthy {
					q := *p
					q.Healthy, q.Error, q.FsyncP99Ms, q.RTTMs = false, "", 14.3, c.rtt
					w.node("v3").Probe = &q
				}
			})
			w.pass()
			got := swapplan.Obstacles(w.snapshot(), api.ManualRequest{Out: "v2", In: "s1", At: w.now, By: "test"})
			assert.Equal(t, []string{c.want}, got)
		})
	}
}

// The removal of a stopped member whose remaining voters all vote names
// none as not voting, and a manual request with no override says nothing
// of overrides.
func TestAReasonNamesNoVoterNotVotingAndNoOverrideWhereThereIsNone(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	start := w.pass()
	assert.Equal(t, api.ActionStart, start.Action.Type, start.Reason)
	assert.Equal(t, "carrying out the manual request of test to swap v1 for s1", start.Reason)
	removal := w.runUntil(100, acting(api.ActionRemoveMember, "v1"))
	assert.Equal(t, "asking k3s to remove the member of v1; 3 remaining voter(s) vote", removal.Reason)
}
