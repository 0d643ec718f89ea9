package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/role"
)

// errStartFailed is a start job that fails, as k3s's server's does when
// its etcd cannot start.
var errStartFailed = errors.New("systemd job did not complete: failed")

// crashLooping is a promoted host whose server cannot start: the role file
// says server, its datastore is there, the server unit is stopped, and
// every start of it fails.
func crashLooping(t *testing.T, f *fixture) {
	t.Helper()
	f.staged()
	f.role("server")
	f.datastore("h2-0a1b2c3d")
	f.cfg.ProbePeriod = time.Second
	t.Cleanup(f.plat.Fail("start", platform.Server, errStartFailed))
}

// starts waits for the n-th start of the server.
func (f *fixture) waitStarts(n int, within time.Duration) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.calls("start", platform.Server) >= n }, within, 5*time.Millisecond,
		"%d start(s) of the server", n)
}

func TestAStartThatFailsIsTriedAgainAfterABackoffNotBackToBack(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.start()
	f.waitStarts(1, 5*time.Second)
	// k3s writing in its data dir, as a start does, wakes the loop.
	for i := range 20 {
		f.write(f.etcdDir()+"/member/wal/"+string(rune('a'+i)), "x")
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, 1, f.calls("start", platform.Server), "no second start within the first backoff (2 s), whatever wakes the loop")
	f.waitStarts(2, 5*time.Second)
	calls := f.plat.Calls()
	var starts []time.Time
	for _, c := range calls {
		if c.Op == "start" && c.Unit == platform.Server {
			starts = append(starts, c.At)
		}
	}
	gap := starts[1].Sub(starts[0])
	assert.GreaterOrEqual(t, gap, retryBackoff.Duration, "the second start after the first backoff")
	assert.LessOrEqual(t, gap, retryBackoff.Duration+time.Duration(float64(retryBackoff.Duration)*retryBackoff.Jitter)+time.Second,
		"and not much later: the backoff's jitter is a fifth at most")
	failed := f.agent.metrics.actions.WithLabelValues(role.DoServe, "failed")
	assert.Eventually(t, func() bool { return testutil.ToFloat64(failed) == 2 }, time.Second, 5*time.Millisecond, "each failed attempt counted once")
}

// lastNote is the last status line the agent told systemd.
func (f *fixture) lastNote() string {
	for {
		select {
		case n := <-f.notes:
			if s, ok := strings.CutPrefix(n, "STATUS="); ok {
				f.status = s
			}
		default:
			return f.status
		}
	}
}

func TestAStepDownAskedWhileAStartHangsIsCarriedOutWithoutWaitingForTheStart(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	release := f.plat.Block("start", platform.Server)
	defer release()
	f.start()
	require.Eventually(t, func() bool { return strings.Contains(f.lastNote(), "the server runs") }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the start hangs, as a start job waiting out k3s's restarts does
	asked := time.Now()
	f.request(api.RequestStepDown)
	r := f.waitReport(api.RequestStepDown, api.StateDone)
	assert.Less(t, time.Since(asked), f.cfg.ProbePeriod, "carried out within one probe period, the hung start stopped")
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(t, "agent\n", string(b))
	st, _ := f.plat.State(context.Background(), platform.Server)
	assert.False(t, st.Active)
	assert.Equal(t, "s1", r.Swap)
}

func TestAStepDownAskedRightAfterAFailedStartIsCarriedOutAtOnceNotAfterTheBackoff(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.start()
	f.waitStarts(1, 5*time.Second)
	require.Eventually(t, func() bool { return strings.Contains(f.lastNote(), "tried again at") }, 5*time.Second, 5*time.Millisecond,
		"the status line says the start waits for its backoff")
	asked := time.Now()
	f.request(api.RequestStepDown)
	f.waitReport(api.RequestStepDown, api.StateDone)
	assert.Less(t, time.Since(asked), f.cfg.ProbePeriod, "a request is carried out at once, not after the failed start's backoff")
	assert.Equal(t, 1, f.calls("start", platform.Server), "the server is not started again")
	assert.Equal(t, 1, f.calls("stop", platform.Server))
}

func TestAFinishToldWhileAStartHangsIsCarriedOutWithoutWaitingForTheStart(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.request(api.RequestPromote)
	f.start()
	f.waitReport(api.RequestPromote, api.StateFailed)
	require.Eventually(t, func() bool { return strings.Contains(f.lastNote(), "tried again at") }, 5*time.Second, 5*time.Millisecond)
	// The next start, after the backoff, hangs.
	release := f.plat.Block("start", platform.Server)
	defer release()
	require.Eventually(t, func() bool { return strings.HasSuffix(f.lastNote(), "the server runs") }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	// The promotion failed; the rollback says the member is gone.
	told := time.Now()
	f.annotate(api.AnnotationMemberGone, "s1")
	f.waitReport(api.ReportFinish, api.StateDone)
	assert.Less(t, time.Since(told), f.cfg.ProbePeriod)
	assert.NoDirExists(t, f.etcdDir(), "its datastore moved aside")
	agent, _ := f.plat.State(context.Background(), platform.Agent)
	assert.True(t, agent.Active, "the host is an agent")
}

// voters is the voters' member list with h2's member, or without it.
func voters(withH2 bool) []etcdclient.Member {
	m := []etcdclient.Member{{ID: 1, Name: "h1-0a1b2c3d", PeerURLs: []string{"https://10.0.0.1:2380"}}, {ID: 3, Name: "h3-0a1b2c3d", PeerURLs: []string{"https://10.0.0.3:2380"}}}
	if withH2 {
		// A learner not started yet: no name, its peer URL alone.
		m = append(m, etcdclient.Member{ID: 2, Learner: true, PeerURLs: []string{"https://10.0.0.2:2380"}})
	}
	return m
}

func TestAServerThatCannotStartFinishesAsAnAgentOnceTheVotersNoLongerListItsMember(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.etcd.setOthers(voters(true))
	f.start()
	f.keepsServing("listed, its member is there: the server is started again")
	assert.Equal(t, "h2-0a1b2c3d", f.agent.st.get().Listed, "the member the voters listed, by its peer URL")

	f.etcd.setOthers(voters(false))
	require.Eventually(t, func() bool {
		st, _ := f.plat.State(context.Background(), platform.Agent)
		return st.Active
	}, 10*time.Second, 10*time.Millisecond, "the host finishes as an agent")
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(t, "agent\n", string(b))
	assert.NoDirExists(t, f.etcdDir(), "its datastore moved aside")
	assert.Len(t, f.removedDirs(), 1)
	f.etcd.mu.Lock()
	defer f.etcd.mu.Unlock()
	require.NotEmpty(t, f.etcd.asked)
	assert.Equal(t, []string{"https://10.0.0.1:2379", "https://10.0.0.3:2379"}, f.etcd.asked[0], "the other servers' client URLs")
}

func TestAServerThatCannotStartAndWasNeverListedIsStartedAgainNotDemoted(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.etcd.setOthers(voters(false))
	f.start()
	f.keepsServing("a member never listed may be added yet: k3s adds it on its start")
	assert.Empty(t, f.agent.st.get().Listed)
}

func TestAServerThatCannotStartIsNotDemotedWhenTheVotersDoNotAnswer(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.write(filepath.Join(f.cfg.StateDir, api.AgentStateFile), `{"v": 1, "listed": "h2-0a1b2c3d"}`)
	f.start()
	f.keepsServing("no answer says nothing")
}

// keepsServing checks that the crash-looping host is started again, a
// server still: its role file says so, its agent unit never started.
func (f *fixture) keepsServing(why string) {
	f.t.Helper()
	f.waitStarts(2, 10*time.Second)
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(f.t, "server\n", string(b), why)
	assert.Zero(f.t, f.calls("start", platform.Agent), why)
}

func TestAServerThatCannotStartFinishesAsAnAgentByK3sOwnSigns(t *testing.T) {
	for _, tc := range []struct {
		name string
		sign func(f *fixture)
	}{
		{"its tombstone", func(f *fixture) { f.tombstone() }},
		{"removed-node-name naming its member", func(f *fixture) { f.annotate(api.AnnotationEtcdRemovedNodeName, "h2-0a1b2c3d") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			crashLooping(t, f)
			f.start()
			f.waitStarts(1, 5*time.Second)
			tc.sign(f)
			require.Eventually(t, func() bool {
				st, _ := f.plat.State(context.Background(), platform.Agent)
				return st.Active
			}, 5*time.Second, 10*time.Millisecond, "the host finishes as an agent")
			b, _ := os.ReadFile(f.cfg.RoleFile)
			assert.Equal(t, "agent\n", string(b))
			assert.NoDirExists(t, f.etcdDir())
		})
	}
}

func TestAFailedDecisionThatIsNotMadeAgainLeavesNoWakeUpBehind(t *testing.T) {
	f := newFixture(t)
	crashLooping(t, f)
	f.start()
	f.waitStarts(1, 5*time.Second)
	// The role file now says agent, and there is no datastore: the
	// agent unit runs, nothing is left to do.
	require.NoError(t, os.RemoveAll(f.etcdDir()))
	f.plat.Set(platform.Agent, true, time.Now())
	f.role("agent")
	require.Eventually(t, func() bool { return strings.Contains(f.lastNote(), "no datastore is left: the agent runs") }, 5*time.Second, 5*time.Millisecond)
	// Note: on a busy machine the failed start's retry (2 s, less its
	// jitter) may come before the agent reads the new role file: starts
	// are counted from the decision that changed, not from the first.
	starts := f.calls("start", platform.Server)
	time.Sleep(2 * retryBackoff.Duration) // the failed start's wait is over
	before, from := f.looks.Load(), time.Now()
	time.Sleep(time.Second)
	// Each look reads the server's state twice at most (the look and the
	// probe); a second at rest is a probe or two, not a loop. Counted per
	// second measured: a busy machine's "second" of sleep is longer, and
	// the probes in it more (3 a second at rest).
	perSecond := float64(f.looks.Load()-before) / time.Since(from).Seconds()
	assert.Less(t, perSecond, 10.0, "the agent rests: no wake-up left armed for a decision no longer made")
	assert.Equal(t, starts, f.calls("start", platform.Server), "no start once the decision is no longer made")
}
