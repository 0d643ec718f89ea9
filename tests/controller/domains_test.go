package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

const zoneLabel = "topology.kubernetes.io/zone"

func TestTheVotersAreKeptSpreadAcrossZonesAndAManualSwapThatCrowdsOneGoesOnlyWhenItOverridesDomains(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	e.cfg.Cooldown = time.Second
	// The zones, as an operator labels the Nodes.
	for node, zone := range map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a", "s2": "b"} {
		_, err := e.api.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+zoneLabel+`":"`+zone+`"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s2"].FsyncMs = 6 }) // fit, but s1 is fitter

	_, stderr, code := e.cli("swap", "v2", "s1")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, `refused: it would put 2 of the 3 voters in `+zoneLabel+` "a", a majority: losing that domain would lose quorum; swap --override domains to do it anyway`)

	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 35 }) // its disk turned slow
	// The waits for a swap's end: a swap here takes some 25 s unhindered
	// (its verdict over 4 samples at 2 s, then its steps, each well inside
	// its bound); 3 minutes, as this suite's other swaps are given, is
	// the slack a busy 2-core machine needs, under the 4m45s the bounds of
	// testConfig add up to.
	e.start()
	res := e.waitEnd(3 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, "v2", res.Out)
	assert.Equal(t, "s2", res.In, "the standby of v2's zone rather than the fitter one of v1's")
	st, _ := e.status()
	require.NotNil(t, st.Domains)
	assert.Equal(t, api.Domains{Label: zoneLabel, Voters: map[string]int{"a": 1, "b": 1, "c": 1}, Span: 3, Survives: 1}, *st.Domains)
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "the voters span 3 of "+zoneLabel+" (a 1, b 1, c 1); quorum survives the loss of any one domain")

	// With --override domains, the crowding swap goes: two of three
	// voters in zone a.
	_, stderr, code = e.cli("swap", "v3", "s1", "--override", "domains")
	require.Equal(t, 0, code, stderr)
	var last *api.SwapResult
	require.Eventually(t, func() bool {
		st, _ = e.status()
		last = st.Last
		return last != nil && last.ID != res.ID && st.Swap == nil
	}, 3*time.Minute, 100*time.Millisecond, "the swap past the domains ends; status: %s", st.Reason)
	assert.Equal(t, api.ResultCompleted, last.Result, last.Reason)
	assertCompleted(t, e, "v3", "s1")
	// Published by the passes after the end: one a second.
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Domains != nil && st.Domains.Voters["a"] == 2
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, 0, st.Domains.Survives, "quorum survives the loss of no zone now")
	out, _, _ = e.cli("status")
	assert.Contains(t, out, "quorum survives the loss of no domain")
}
