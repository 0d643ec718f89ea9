package swapplan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// refusals are the three refusals of the start of a manual swap that an
// override passes, each set on a world where swapping v2 for s1 is
// otherwise clear: the override that passes it, and what the planner
// says of it.
var refusals = []struct {
	override string
	set      func(w *world)
	says     string
}{
	{api.OverridePause, func(w *world) { w.pause = &api.Pause{By: "alice", Reason: "kernel upgrades", At: w.now} },
		"waits: paused by alice at "},
	{api.OverrideHolds, func(w *world) { w.holds = []string{"kured's reboot lock is held by v3"} },
		"waits: held: kured's reboot lock is held by v3; or swap --override holds"},
	{api.OverrideDomains, func(w *world) {
		w.cfg.DomainLabel = "zone"
		for name, zone := range map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a"} {
			w.node(name).Domain = zone
		}
	}, `is refused: it would put 2 of the 3 voters in zone "a", a majority: losing that domain would lose quorum; or swap --override domains`},
}

// Each override passes its own refusal and neither of the other two: a
// request with one override starts past that refusal alone, and waits
// (or is refused) for each of the others, saying which override it
// would take; the swap it starts records the override.
func TestEachOverrideAlonePassesItsOwnRefusalAndNotTheOtherTwo(t *testing.T) {
	for _, refusal := range refusals {
		for _, override := range api.Overrides() {
			t.Run(refusal.override+" refusal, "+override+" override", func(t *testing.T) {
				w := newWorld(t, 3, 1, 0)
				refusal.set(w)
				w.requestSwap("v2", "s1")
				w.request.Overrides = []string{override}
				obstacles := swapplan.Obstacles(w.snapshot(), *w.request)
				plan := w.pass()
				if override != refusal.override {
					assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
					assert.Contains(t, plan.Reason, "the manual request to swap v2 for s1 "+refusal.says)
					assert.Equal(t, []string{refusal.says}, firstWords(obstacles, refusal.says))
					return
				}
				require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
				assert.Equal(t, []string{override}, plan.Swap.Overrides, "the record says the override it was started with")
				assert.Contains(t, plan.Reason, "carrying out the manual request of test to swap v2 for s1, past: "+override)
				assert.Empty(t, obstacles)
			})
		}
	}
}

// firstWords keeps the reasons that begin as want does (the pause's says
// when, which a test does not pin).
func firstWords(reasons []string, want string) []string {
	var out []string
	for _, r := range reasons {
		if strings.HasPrefix(r, want) {
			out = append(out, want)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// With the pause, a hold, a crowded failure domain and an unhealthy voter
// at once, Obstacles names each, in the planner's order, and the first is
// what the planner waits for; each override takes its own off the list
// and the unhealthy voter, which no override passes, stays.
func TestObstaclesNamesEachRefusalOfTheRequestAndEachOverrideTakesOnlyItsOwnOff(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	for _, r := range refusals {
		r.set(w)
	}
	w.unanswering("v3")
	w.pass()
	q := api.ManualRequest{Out: "v2", In: "s1", At: w.now, By: "test"}
	got := swapplan.Obstacles(w.snapshot(), q)
	require.Len(t, got, 4, "%q", got)
	for i, r := range refusals {
		assert.True(t, strings.HasPrefix(got[i], r.says), "%q does not begin %q", got[i], r.says)
	}
	assert.Equal(t, "waits: v3's probe says unhealthy: etcd did not answer within 2s", got[3])
	w.request = &q
	assert.Equal(t, "the manual request to swap v2 for s1 "+got[0], w.pass().Reason)

	for i, r := range refusals {
		q.Overrides = []string{r.override}
		left := swapplan.Obstacles(w.snapshot(), q)
		assert.Len(t, left, 3, "%s: %q", r.override, left)
		assert.NotContains(t, left, got[i], r.override)
	}
	q.Overrides = api.Overrides()
	assert.Equal(t, []string{got[3]}, swapplan.Obstacles(w.snapshot(), q), "no override passes the start gates")
}

// Obstacles names what `fleet-role swap` would not write the request for:
// a swap under way, and another request that waits; and with OUT or IN
// wrong it weighs nothing after them.
func TestObstaclesNamesASwapUnderWayAnotherRequestThatWaitsAndAWrongOutOrIn(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.requestSwap("v1", "s1")
	other := api.ManualRequest{Out: "v2", In: "s2", At: w.now, By: "bob"}
	got := swapplan.Obstacles(w.snapshot(), other)
	require.Len(t, got, 1, "%q", got)
	assert.Contains(t, got[0], "is refused: test's request to swap v1 for s1 (at ")
	w.runUntil(20, acting(api.ActionPromote, "s1"))
	got = swapplan.Obstacles(w.snapshot(), other)
	require.NotEmpty(t, got)
	assert.Regexp(t, `^is refused: swap \S+ \(v1 out, s1 in\) is under way$`, got[0])
	w2 := newWorld(t, 3, 1, 0)
	w2.pause = &api.Pause{By: "alice", Reason: "kernel upgrades", At: w2.now}
	got = swapplan.Obstacles(w2.snapshot(), api.ManualRequest{Out: "s1", In: "v1", At: w2.now})
	require.Len(t, got, 2, "%q", got)
	assert.Equal(t, "is refused: s1 is not a voter", got[1])
	assert.Equal(t, []string{"is refused: there is no Node v9"}, swapplan.Obstacles(newWorld(t, 3, 1, 0).snapshot(), api.ManualRequest{Out: "v9", In: "s1", At: w2.now}),
		"the start gates of an OUT that is no Node are not weighed")
	assert.Equal(t, []string{`is refused: OUT and IN are the same node "v1"`}, swapplan.Obstacles(w2.snapshot(), api.ManualRequest{Out: "v1", In: "v1", At: w2.now}))
}
