package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// mcfg judges a member's latencies by etcd's guidance.
var mcfg = swapplan.VerdictConfig{Window: 5, FsyncLimit: 10 * time.Millisecond, ReadLimit: 100 * time.Millisecond,
	WALFsyncLimit: 10 * time.Millisecond, BackendCommitLimit: 25 * time.Millisecond, Period: time.Minute}

// etcdBuckets are etcd's bounds for both histograms (1 ms doubling).
var etcdBuckets = []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192}

// observe adds n observations of d to a cumulative histogram.
func observe(h *api.Histogram, d time.Duration, n uint64) {
	if h.Buckets == nil {
		for _, le := range etcdBuckets {
			h.Buckets = append(h.Buckets, api.Bucket{LE: le})
		}
	}
	for i := range h.Buckets {
		if d.Seconds() <= h.Buckets[i].LE {
			h.Buckets[i].Count += n
		}
	}
	h.Count += n
	h.Sum += float64(n) * d.Seconds()
}

func clone(h api.Histogram) *api.Histogram {
	h.Buckets = append([]api.Bucket(nil), h.Buckets...)
	return &h
}

// memberWindow makes n samples of a server whose agent reads its member's
// latencies: in the period before sample i, f adds its WAL fsyncs and
// backend commits to the member's histograms (nil: 200 and 100 of 1 ms).
func memberWindow(n int, f func(i int, wal, commit *api.Histogram)) []api.Probe {
	var wal, commit api.Histogram
	return window(n, func(i int, p *api.Probe) {
		if f == nil {
			observe(&wal, time.Millisecond, 200)
			observe(&commit, time.Millisecond, 100)
		} else {
			f(i, &wal, &commit)
		}
		p.EtcdLatencies = &api.EtcdLatencies{WALFsync: clone(wal), BackendCommit: clone(commit)}
	})
}

// steady adds a period of a busy member's writes: 200 WAL fsyncs and 100
// commits of 1 ms.
func steady(wal, commit *api.Histogram) {
	observe(wal, time.Millisecond, 200)
	observe(commit, time.Millisecond, 100)
}

func TestAVoterIsJudgedByItsMembersOwnLatenciesOverTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []api.Probe
		state   string
		reason  string
	}{
		{"a member whose writes are fast is fit", memberWindow(5, nil), api.VerdictFit,
			"etcd's WAL fsync p99 1.0 ms, backend commit p99 1.0 ms, over 800 writes; 0 of 5 samples bad"},
		{"two slow fsyncs among a window's 800 writes leave the p99 fast: fit", memberWindow(5, func(i int, wal, commit *api.Histogram) {
			steady(wal, commit)
			if i == 2 {
				observe(wal, 200*time.Millisecond, 2)
			}
		}), api.VerdictFit, "etcd's WAL fsync p99 1.0 ms"},
		{"the probe's own fsync p99 over its limit in every sample does not judge a voter", func() []api.Probe {
			s := memberWindow(5, nil)
			for i := range s {
				s[i].FsyncP99Ms = 50
			}
			return s
		}(), api.VerdictFit, "0 of 5 samples bad"},
		{"a WAL fsync p99 over 10 ms is unfit", memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, 20*time.Millisecond, 200)
			observe(commit, time.Millisecond, 100)
		}), api.VerdictUnfit, "etcd's WAL fsync p99 31.8 ms over 10ms, backend commit p99 1.0 ms, over 800 writes; 0 of 5 samples bad"},
		{"a backend commit p99 over 25 ms is unfit", memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, time.Millisecond, 200)
			observe(commit, 40*time.Millisecond, 100)
		}), api.VerdictUnfit, "backend commit p99 63.7 ms over 25ms"},
		{"fewer than 100 writes in the window are no verdict on latencies, however slow", memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, 500*time.Millisecond, 20)
			observe(commit, 500*time.Millisecond, 20)
		}), api.VerdictFit, "etcd's WAL fsync not judged: 80 in the window, fewer than 100, backend commit not judged: 80 in the window, fewer than 100, over 80 writes"},
		{"latencies not read are no verdict, and say why", window(5, func(_ int, p *api.Probe) {
			p.EtcdLatencies = &api.EtcdLatencies{Error: "etcd metrics: connection refused"}
		}), api.VerdictFit, "no verdict on etcd's latencies: etcd metrics: connection refused; 0 of 5 samples bad"},
		{"a member restarted in the window is judged on its writes since", memberWindow(5, func(i int, wal, commit *api.Histogram) {
			if i == 3 {
				*wal, *commit = api.Histogram{}, api.Histogram{}
			}
			if i >= 3 {
				observe(wal, 20*time.Millisecond, 200)
				observe(commit, time.Millisecond, 100)
				return
			}
			steady(wal, commit)
		}), api.VerdictUnfit, "etcd's WAL fsync p99 31.8 ms over 10ms, backend commit p99 1.0 ms, over 200 writes since the member restarted"},
		{"most samples with an error is unfit, however fast the member", func() []api.Probe {
			s := memberWindow(5, nil)
			for i := range 3 {
				s[i].Error = "etcd status: context deadline exceeded"
			}
			return s
		}(), api.VerdictUnfit, "an error in 3 of 5 samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := swapplan.Judge(tc.samples, epoch, mcfg)
			assert.Equal(t, tc.state, v.State, v.Reason)
			assert.Contains(t, v.Reason, tc.reason)
		})
	}
}

func TestAVotersVerdictCarriesItsMembersP99sAndTheWritesTheyAreOver(t *testing.T) {
	v := swapplan.Judge(memberWindow(5, func(_ int, wal, commit *api.Histogram) {
		observe(wal, 3*time.Millisecond, 200)
		observe(commit, 6*time.Millisecond, 100)
	}), epoch, mcfg)
	assert.Equal(t, api.VerdictFit, v.State, v.Reason)
	assert.InDelta(t, 3.98, v.WALFsyncP99Ms, 0.001, "interpolated in (2 ms, 4 ms]")
	assert.InDelta(t, 7.96, v.BackendCommitP99Ms, 0.001, "interpolated in (4 ms, 8 ms]")
	assert.Equal(t, uint64(800), v.Writes, "four periods: the first sample's counts are the window's start")
	assert.InDelta(t, 3.98, v.Score, 0.001, "no bad sample: the WAL fsync p99")
}

func TestAStandbyIsStillJudgedByTheProbesOwnFsyncP99(t *testing.T) {
	v := swapplan.Judge(window(5, func(_ int, p *api.Probe) { p.FsyncP99Ms = 50 }), epoch, mcfg)
	assert.Equal(t, api.VerdictUnfit, v.State, v.Reason)
	assert.Contains(t, v.Reason, "fsync p99 over 10ms in 5 of 5 samples")
	assert.Zero(t, v.WALFsyncP99Ms)
}
