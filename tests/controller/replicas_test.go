package controller_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller"
)

// replica is a second controller of the same fleet.
type replica struct {
	c      *controller.Controller
	cancel context.CancelFunc
	done   chan error
}

func (e *env) replica(name string) *replica {
	c, err := controller.New(controller.Options{Config: e.cfg, Client: e.client(), Identity: name})
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.t.Cleanup(func() { r.cancel(); <-r.done })
	return r
}

func TestTwoReplicasOneActsAndTheOtherTakesOverMidSwap(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	a, b := e.replica("replica-a"), e.replica("replica-b")
	require.Eventually(t, func() bool { return a.c.Passes()+b.c.Passes() > 0 }, 20*time.Second, 20*time.Millisecond)
	leader, standby := a, b
	if b.c.Passes() > 0 {
		leader, standby = b, a
	}
	time.Sleep(2 * time.Second)
	assert.Zero(t, standby.c.Passes(), "only the leader makes passes")

	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool {
		st, _ := e.status()
		return st.Step == api.StepJoin || st.Step == api.StepCordonOut || st.Step == api.StepStepDown
	}, time.Minute, 20*time.Millisecond)
	leader.cancel() // the leader's pod goes away mid-swap
	require.NoError(t, <-leader.done)
	leader.done <- nil
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Positive(t, standby.c.Passes(), "the other replica took over")
	assertCompleted(t, e, "v1", "s1")
}

func TestTheControllerServesMetricsAndHealth(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	require.Eventually(t, func() bool { return e.ctrl.Passes() > 0 }, 20*time.Second, 20*time.Millisecond)
	srv := httptest.NewServer(e.ctrl.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	_, stderr, c := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, c, stderr)
	e.waitEnd(2 * time.Minute)
	// The pass that ends the swap writes status.json, then its metrics.
	var body string
	require.Eventually(t, func() bool {
		_, body = get("/metrics")
		return strings.Contains(body, `fleet_role_swap_step{step="none"} 1`)
	}, 5*time.Second, 50*time.Millisecond, "the step gauge follows the end")
	for _, want := range []string{
		`fleet_role_swap_step{step="none"} 1`,
		`fleet_role_actions_total{action="promote"} 1`,
		`fleet_role_actions_total{action="end"} 1`,
		"fleet_role_pass_seconds_count",
		"fleet_role_voters 3",
		"fleet_role_leader 1",
	} {
		assert.Contains(t, body, want)
	}
	// Every action's reaction time, from the change that let it go, is
	// observed once.
	actions, reactions := 0.0, 0.0
	for _, line := range strings.Split(body, "\n") {
		name, value, _ := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(value, 64)
		switch {
		case err != nil:
		case strings.HasPrefix(name, "fleet_role_actions_total{"):
			actions += v
		case name == "fleet_role_reaction_seconds_count":
			reactions = v
		}
	}
	assert.GreaterOrEqual(t, actions, 12.0)
	assert.Equal(t, actions, reactions)
}

func TestFleetRoleStatusWatchRefreshesInPlace(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	require.Eventually(t, func() bool { st, _ := e.status(); return len(st.Voters) == 3 }, 20*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "status", "--watch", "--interval", "300ms", "--kubeconfig", e.api.Kubeconfig)
	out, _ := cmd.Output()
	frames := strings.Count(string(out), "\033[H\033[2J")
	assert.GreaterOrEqual(t, frames, 3, "redrawn in place: %d frames", frames)
	assert.Contains(t, string(out), "SWAP")
	assert.Contains(t, string(out), "none under way")
}
