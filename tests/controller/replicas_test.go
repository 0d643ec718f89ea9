package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/tests/testhost"
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

func TestFleetRoleStatusWatchRedrawsOnATerminalAndPrintsPlainLinesIntoAPipe(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	require.Eventually(t, func() bool { st, _ := e.status(); return len(st.Voters) == 3 }, 20*time.Second, 20*time.Millisecond)
	watch := func() *exec.Cmd {
		return exec.Command(binary, "status", "--watch", "--interval", "300ms", "--kubeconfig", e.api.Kubeconfig)
	}

	// On a terminal (a pseudo-terminal here) it redraws in place.
	cmd := watch()
	tty, err := pty.Start(cmd)
	require.NoError(t, err)
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, tty); close(copied) }()
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "an interrupt is a clean exit")
	tty.Close()
	<-copied
	frames := strings.Count(screen.String(), "\033[H\033[2J")
	assert.GreaterOrEqual(t, frames, 3, "redrawn in place: %d frames", frames)
	assert.Contains(t, screen.String(), "none under way")

	// Into a pipe: no terminal escapes, the status printed once while it
	// does not change, and again when it does.
	cmd = watch()
	var piped testhost.SyncBuffer
	cmd.Stdout = &piped
	require.NoError(t, cmd.Start())
	time.Sleep(1500 * time.Millisecond)
	assert.Equal(t, 1, strings.Count(piped.String(), "HOST  "), "an idle fleet's status printed once in five reads: %s", piped.String())
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { return strings.Contains(piped.String(), "REQUEST") }, 20*time.Second, 50*time.Millisecond,
		"the request printed once written: %s", piped.String())
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	out := piped.String()
	assert.NotContains(t, out, "\033[", "no escapes into a pipe")
	assert.GreaterOrEqual(t, strings.Count(out, "HOST  "), 2, "printed again at the change: %s", out)

	// -o json is the status document, for jq.
	stdout, stderr, code := e.cli("status", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st api.Status
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	assert.Len(t, st.Voters, 3)
	jq, err := exec.LookPath("jq")
	if os.Getenv("CI") != "" {
		require.NoError(t, err, "jq is installed by .ci/setup")
	}
	if err == nil {
		cmd := exec.Command(jq, "-r", ".voters | length")
		cmd.Stdin = strings.NewReader(stdout)
		n, err := cmd.Output()
		require.NoError(t, err)
		assert.Equal(t, "3\n", string(n))
	}
}
