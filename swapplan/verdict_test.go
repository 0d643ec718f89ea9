package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

var vcfg = swapplan.VerdictConfig{Window: 5, FsyncLimit: 10 * time.Millisecond, ReadLimit: 100 * time.Millisecond, Period: time.Minute}

// window makes n samples a minute apart ending at epoch, the i-th made by f.
func window(n int, f func(i int, p *api.Probe)) []api.Probe {
	out := make([]api.Probe, n)
	for i := range out {
		out[i] = api.Probe{At: epoch.Add(-time.Duration(n-1-i) * time.Minute), Period: api.Duration(time.Minute), Healthy: true, FsyncP99Ms: 2, RTTMs: 1}
		if f != nil {
			f(i, &out[i])
		}
	}
	return out
}

func TestVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []api.Probe
		now     time.Time
		state   string
		bad     int
		reason  string
	}{
		{"no samples is silent", nil, epoch, api.VerdictSilent, 0, "no probe sample"},
		{"a partial window gives no verdict", window(4, nil), epoch, api.VerdictPartial, 0, "4 of 5 samples"},
		{"a partial window of slow samples gives no verdict either", window(4, func(_ int, p *api.Probe) { p.FsyncP99Ms = 50 }), epoch, api.VerdictPartial, 0, "partial"},
		{"a full window of good samples is fit", window(5, nil), epoch, api.VerdictFit, 0, "0 of 5 samples bad"},
		{"most samples over the fsync limit is unfit", window(5, func(i int, p *api.Probe) {
			if i < 3 {
				p.FsyncP99Ms = 31
			}
		}), epoch, api.VerdictUnfit, 3, "fsync p99 over 10ms in 3 of 5 samples"},
		{"half or fewer over the limit is fit: one slow second is no swap", window(6, func(i int, p *api.Probe) {
			if i == 0 || i > 3 {
				p.FsyncP99Ms = 31
			}
		}), epoch, api.VerdictFit, 2, "fsync p99 over 10ms in 2 of 5"},
		{"a sample at the limit is not over it", window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 10 }), epoch, api.VerdictFit, 0, ""},
		{"a sample just over the limit is", window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 10.01 }), epoch, api.VerdictUnfit, 5, ""},
		{"slow reads are bad", window(5, func(_ int, p *api.Probe) { p.RTTMs = 250 }), epoch, api.VerdictUnfit, 5, "reads over 100ms in 5"},
		{"unhealthy samples are bad", window(5, func(i int, p *api.Probe) { p.Healthy = i < 2 }), epoch, api.VerdictUnfit, 3, "unhealthy in 3"},
		{"samples that could not reach etcd are bad", window(5, func(_ int, p *api.Probe) { p.Error = "etcd: context deadline exceeded" }), epoch, api.VerdictUnfit, 5, "an error in 5"},
		{"a probe silent for 3 periods is silent, whatever its window said", window(5, nil), epoch.Add(3*time.Minute + time.Second), api.VerdictSilent, 0, "3 periods"},
		{"a probe late by less than 3 periods still has its verdict", window(5, nil), epoch.Add(3 * time.Minute), api.VerdictFit, 0, ""},
		{"a sample that gives no period is judged by the configured one", window(5, func(_ int, p *api.Probe) { p.Period = 0 }), epoch.Add(2 * time.Minute), api.VerdictFit, 0, ""},
		{"a read at its limit is not over it", window(5, func(_ int, p *api.Probe) { p.RTTMs = 100 }), epoch, api.VerdictFit, 0, "0 of 5 samples bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := swapplan.Judge(tc.samples, tc.now, vcfg)
			assert.Equal(t, tc.state, v.State, v.Reason)
			assert.Equal(t, tc.bad, v.Bad)
			assert.Contains(t, v.Reason, tc.reason)
		})
	}
}

func TestVerdictFiguresAndTies(t *testing.T) {
	v := swapplan.Judge(window(5, func(i int, p *api.Probe) { p.FsyncP99Ms = float64(i + 1); p.RTTMs = float64(10 * (i + 1)) }), epoch, vcfg)
	assert.Equal(t, 3.0, v.FsyncP99Ms, "the median")
	assert.Equal(t, 30.0, v.RTTMs)
	assert.Equal(t, 5, v.Samples)
	// A window of an even count: the mean of the two middle samples.
	even := swapplan.Judge(window(4, func(i int, p *api.Probe) { p.FsyncP99Ms = float64(i + 1) }),
		epoch, swapplan.VerdictConfig{Window: 4, FsyncLimit: vcfg.FsyncLimit, ReadLimit: vcfg.ReadLimit, Period: vcfg.Period})
	assert.Equal(t, 2.5, even.FsyncP99Ms, "the median of 1 2 3 4")

	// More bad samples is worse; with as many, the slower disk.
	worse := swapplan.Judge(window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 20 }), epoch, vcfg)
	slower := swapplan.Judge(window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 40 }), epoch, vcfg)
	fewer := swapplan.Judge(window(5, func(i int, p *api.Probe) {
		if i < 3 {
			p.FsyncP99Ms = 90
		}
	}), epoch, vcfg)
	assert.Greater(t, slower.Score, worse.Score)
	assert.Greater(t, worse.Score, fewer.Score, "five bad samples are worse than three, however slow")

	// Ties between hosts break on the name: the planner's decision.
	w := newWorld(t, 3, 2, 0)
	w.cfg.DryRun = false
	for _, n := range []string{"v2", "v3"} {
		w.node(n).Verdict = swapplan.Judge(window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 20 }), epoch, vcfg)
	}
	for _, n := range []string{"s1", "s2"} {
		w.node(n).Verdict = swapplan.Judge(window(5, nil), epoch, vcfg)
	}
	p := swapplan.Next(w.snapshot())
	assert.Equal(t, "v2", p.Decision.Out, "v2 and v3 tie: the first by name")
	assert.Equal(t, "s1", p.Decision.In)
}

func TestHalfAnEvenWindowBadIsFit(t *testing.T) {
	c := vcfg
	c.Window = 4
	v := swapplan.Judge(window(4, func(i int, p *api.Probe) { p.Healthy = i < 2 }), epoch, c)
	assert.Equal(t, api.VerdictFit, v.State, v.Reason)
	assert.Equal(t, 2, v.Bad)
}

func TestWithNoReadLimitSlowReadsAreNotBadAndTheReadMedianLeavesOutSamplesWithoutARead(t *testing.T) {
	c := vcfg
	c.ReadLimit = 0
	v := swapplan.Judge(window(5, func(i int, p *api.Probe) {
		p.RTTMs = 0 // no read timed
		if i >= 2 {
			p.RTTMs = float64(1000 * i)
		}
	}), epoch, c)
	assert.Equal(t, api.VerdictFit, v.State, v.Reason)
	assert.Equal(t, 0, v.Bad)
	assert.InDelta(t, 3000, v.RTTMs, 0.001, "the median of the three reads timed")
}
