package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

type brokenEtcd struct{ fakeEtcd }

func (*brokenEtcd) Status(context.Context) (etcdclient.Status, error) {
	return etcdclient.Status{}, errors.New("etcd status: context deadline exceeded")
}

func (*brokenEtcd) Read(context.Context) (time.Duration, error) {
	return 0, errors.New("etcd linearizable read: context deadline exceeded")
}

func TestTheProbeOfAnAgentSamplesTheDiskOnly(t *testing.T) {
	p := newProber(t.TempDir(), config.DefaultAgent().Probe, time.Minute, &fakeEtcd{})
	defer p.close()
	now := time.Now()
	s, members := p.sample(context.Background(), now, false, true)
	assert.Nil(t, members)
	assert.True(t, s.Healthy, s.Error)
	assert.True(t, s.Staged)
	assert.Positive(t, s.FsyncP99Ms)
	assert.Empty(t, s.Members)
	assert.Equal(t, api.Duration(time.Minute), s.Period)
	assert.NoError(t, s.Validate())
	assert.Len(t, p.fsyncs, 5)
	for range 30 {
		p.sample(context.Background(), now, false, true)
	}
	assert.Len(t, p.fsyncs, 100, "the p99 is over the last history writes")
}

func TestTheProbeOfAServerReadsItsEtcd(t *testing.T) {
	e := &fakeEtcd{members: []etcdclient.Member{{ID: 1, Name: "h1-0a1b2c3d"}, {ID: 2, Name: "h2-0a1b2c3d"}, {ID: 0x8e9e05c52164694d, Name: "s1-0a1b2c3d", Learner: true}}}
	p := newProber(t.TempDir(), config.DefaultAgent().Probe, time.Minute, e)
	defer p.close()
	s, members := p.sample(context.Background(), time.Now(), true, false)
	assert.True(t, s.Healthy, s.Error)
	assert.Equal(t, "h2-0a1b2c3d", s.Member)
	assert.Equal(t, "h1-0a1b2c3d", s.Leader)
	assert.Equal(t, 1.0, s.RTTMs)
	assert.Equal(t, []api.Member{{Name: "h1-0a1b2c3d", ID: "1"}, {Name: "h2-0a1b2c3d", ID: "2"}, {Name: "s1-0a1b2c3d", Learner: true, ID: "8e9e05c52164694d"}}, s.Members, "IDs in hex, as etcdctl prints them")
	assert.Len(t, members, 3)
}

func TestAProbeThatCannotReachEtcdSaysSoAndIsUnhealthy(t *testing.T) {
	p := newProber(t.TempDir(), config.DefaultAgent().Probe, time.Minute, &brokenEtcd{})
	defer p.close()
	s, _ := p.sample(context.Background(), time.Now(), true, false)
	assert.False(t, s.Healthy)
	assert.Contains(t, s.Error, "etcd status: context deadline exceeded")
	assert.Contains(t, s.Error, "etcd linearizable read")
	assert.Positive(t, s.FsyncP99Ms, "the disk is sampled whatever etcd does")
}

func TestTheFsyncP99IsThe99thPercentile(t *testing.T) {
	p := &prober{}
	for i := 1; i <= 100; i++ {
		p.fsyncs = append(p.fsyncs, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 99.0, p.p99())
	p.fsyncs = []time.Duration{time.Millisecond, 40 * time.Millisecond}
	assert.Equal(t, 40.0, p.p99(), "with few writes, the slowest")
}

// TestTheProbeOfAMemberMadeSlowGivesAnUnfitVerdictWithinOneWindow runs
// the probe against a real etcd cluster of three processes and pauses one
// member, as a host that stalls: its host's probe turns unfit within one
// window, a healthy one's stays fit.
func TestTheProbeOfAMemberMadeSlowGivesAnUnfitVerdictWithinOneWindow(t *testing.T) {
	ms := kubeapi.StartEtcdCluster(t, 3)
	judge := swapplan.VerdictConfig{Window: 10, FsyncLimit: 10 * time.Millisecond, ReadLimit: 100 * time.Millisecond, Period: 500 * time.Millisecond}
	probe := func(m *kubeapi.EtcdMember) (*prober, func()) {
		c, err := etcdclient.New(etcdclient.Config{Endpoint: m.ClientURL, Timeout: 100 * time.Millisecond})
		require.NoError(t, err)
		cfg := config.DefaultAgent().Probe
		// Note: the verdict here rests on etcd; this VM's own disk may be
		// slow to fsync, which is not what this test is about.
		cfg.FsyncLimit = time.Hour
		return newProber(t.TempDir(), cfg, judge.Period, c), func() { c.Close() }
	}
	healthy, closeA := probe(ms[0])
	defer closeA()
	slow, closeB := probe(ms[2])
	defer closeB()
	judge.FsyncLimit = time.Hour
	sample := func(p *prober, n int) []api.Probe {
		var out []api.Probe
		for range n {
			start := time.Now()
			s, _ := p.sample(context.Background(), start, true, false)
			out = append(out, s)
			time.Sleep(judge.Period - time.Since(start)) // a sample every period, as the agent's ticker
		}
		return out
	}
	before := sample(slow, judge.Window)
	assert.Equal(t, api.VerdictFit, swapplan.Judge(before, time.Now(), judge).State)

	require.NoError(t, ms[2].Pause())
	defer ms[2].Resume()
	start := time.Now()
	window := sample(slow, judge.Window)
	v := swapplan.Judge(append(before, window...), time.Now(), judge)
	assert.Equal(t, api.VerdictUnfit, v.State, v.Reason)
	assert.Contains(t, v.Reason, "an error in 10")
	assert.Equal(t, 10, v.Bad)
	t.Logf("the paused member's host: %s after %s (one window of %d samples at %s)", v.Reason, time.Since(start).Round(time.Millisecond), judge.Window, judge.Period)

	fit := swapplan.Judge(sample(healthy, judge.Window), time.Now(), judge)
	assert.Equal(t, api.VerdictFit, fit.State, fit.Reason)
	assert.Positive(t, fit.RTTMs)
}

// hungEtcd is a local member that answers nothing: each call waits until
// its context ends, as a server's etcd that cannot start does.
type hungEtcd struct{ fakeEtcd }

func (*hungEtcd) Members(ctx context.Context) ([]etcdclient.Member, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("etcd member list: %w", ctx.Err())
}

func (*hungEtcd) Status(ctx context.Context) (etcdclient.Status, error) {
	<-ctx.Done()
	return etcdclient.Status{}, fmt.Errorf("etcd status: %w", ctx.Err())
}

func (*hungEtcd) Read(ctx context.Context) (time.Duration, error) {
	<-ctx.Done()
	return 0, fmt.Errorf("etcd linearizable read: %w", ctx.Err())
}

func TestASampleOfAServerWhoseEtcdAnswersNothingComesWithinOnePeriodAndSaysSo(t *testing.T) {
	const period = 300 * time.Millisecond
	p := newProber(t.TempDir(), config.DefaultAgent().Probe, period, &hungEtcd{})
	defer p.close()
	start := time.Now()
	s, members := p.sample(context.Background(), start, true, false)
	took := time.Since(start)
	assert.Less(t, took, 2*period, "the three calls wait side by side, within one period, not one after another")
	assert.Nil(t, members)
	assert.False(t, s.Healthy)
	for _, call := range []string{"etcd member list", "etcd status", "etcd linearizable read"} {
		assert.Contains(t, s.Error, call+": context deadline exceeded (etcd did not answer within the probe period 300ms)")
	}
	assert.NoError(t, s.Validate())
}
