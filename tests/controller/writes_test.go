package controller_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

func TestASwapsWriteGapAndFailedWritesAreInItsHistoryAndMetricsAndOneOverBudgetIsCounted(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	// The API server answers the controller's timed writes as a cluster
	// in its leadership move does: the first after 1.5 s, the second not
	// at all (an error), the rest at once.
	const held = 1500 * time.Millisecond
	var writes atomic.Int32
	e.rest.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodPatch || !strings.HasSuffix(r.URL.Path, "/leases/"+api.WritesLease) {
				return rt.RoundTrip(r)
			}
			switch writes.Add(1) {
			case 1:
				select {
				case <-time.After(held):
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			case 2:
				return nil, errors.New("etcdserver: leader changed")
			}
			return rt.RoundTrip(r)
		})
	})
	e.cfg.WriteGapBudget = time.Second
	// The leadership move lasts a while: v1's agent reads its step-down
	// 3 s after the step began (time for the held write, the failed one
	// and more), as an agent busy with its host would.
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v1"].IgnoreStepDown = true })
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	// Note: the swap reaches its step-down in about 5 s at the test
	// bounds; a minute, and 2 for its end, are outer limits.
	require.Eventually(t, func() bool { st, _ := e.status(); return st.Step == api.StepStepDown }, time.Minute, 50*time.Millisecond)
	time.Sleep(3 * time.Second)
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v1"].IgnoreStepDown, d.Hosts["v1"].Handled = false, time.Time{} })
	res := e.waitEnd(2 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)

	require.NotNil(t, res.Writes, "the swap's leadership move and removal were timed")
	t.Logf("write cost: %d writes, %d failed, longest gap %s", res.Writes.Writes, res.Writes.Failed, time.Duration(res.Writes.LongestGap))
	assert.GreaterOrEqual(t, res.Writes.Writes, 2)
	assert.Equal(t, 1, res.Writes.Failed)
	assert.GreaterOrEqual(t, time.Duration(res.Writes.LongestGap), held, "the gap holds the held write")
	st, _ := e.status()
	require.NotEmpty(t, st.History)
	assert.Equal(t, res.Writes, st.History[0].Writes)

	// Note: the pass that wrote the end counts it once its write is made:
	// the status may be read before; 10 s are an outer limit.
	assert.Eventually(t, func() bool {
		return e.metric("fleet_role_swaps_over_write_gap_budget_total") == "fleet_role_swaps_over_write_gap_budget_total 1"
	}, 10*time.Second, 50*time.Millisecond, "the swap over its budget is counted: %s", e.metric("fleet_role_swaps_over_write_gap_budget_total"))
	assert.Equal(t, "fleet_role_swap_write_failures_total 1", e.metric("fleet_role_swap_write_failures_total"))
	assert.Equal(t, "fleet_role_swap_write_gap_budget_seconds 1", e.metric("fleet_role_swap_write_gap_budget_seconds"))
	assert.NotEmpty(t, e.metric("fleet_role_swap_write_gap_seconds"))

	out, _, code := e.cli("history")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "WRITE GAP")
	assert.Regexp(t, `\d+(\.\d+)?s \(1 of \d+ failed\)`, out)
	t.Logf("fleet-role history:\n%s", out)
}
