package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// The edges of a voter's verdict on its member's latencies: two samples
// that carry them are enough; a window whose last sample carries no
// histogram and no error, and fewer than two that do, is no verdict, said
// so; a member restarted at
// the window's last sample is no verdict, said so; a p99 exactly at its
// limit is within it (etcd's guidance: under 10 ms is over nothing); and
// a bad sample weighs a thousand milliseconds in the score.
func TestAVotersLatencyVerdictAtItsEdges(t *testing.T) {
	t.Run("two samples that carry latencies are judged", func(t *testing.T) {
		s := memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, 20*time.Millisecond, 200)
			observe(commit, time.Millisecond, 100)
		})
		for i := range 3 {
			s[i].EtcdLatencies = nil
		}
		v := swapplan.Judge(s, epoch, mcfg)
		assert.Equal(t, api.VerdictUnfit, v.State, v.Reason)
		assert.Contains(t, v.Reason, "etcd's WAL fsync p99 31.8 ms over 10ms")
	})
	t.Run("fewer than two carrying histograms, the last none and no error, is no verdict", func(t *testing.T) {
		s := memberWindow(5, nil)
		for _, i := range []int{0, 2, 3} {
			s[i].EtcdLatencies = nil
		}
		s[4].EtcdLatencies = &api.EtcdLatencies{}
		v := swapplan.Judge(s, epoch, mcfg)
		assert.Equal(t, api.VerdictFit, v.State, v.Reason)
		assert.Contains(t, v.Reason, "no verdict on etcd's latencies: fewer than two samples of the window carry them")
	})
	t.Run("a member restarted at the window's last sample is no verdict", func(t *testing.T) {
		v := swapplan.Judge(memberWindow(5, func(i int, wal, commit *api.Histogram) {
			if i == 4 {
				*wal, *commit = api.Histogram{}, api.Histogram{}
				observe(wal, 20*time.Millisecond, 150)
				observe(commit, time.Millisecond, 100)
				return
			}
			steady(wal, commit)
		}), epoch, mcfg)
		assert.Equal(t, api.VerdictFit, v.State, v.Reason)
		assert.Contains(t, v.Reason, "no verdict on etcd's latencies: the member restarted at the window's last sample")
	})
	t.Run("a p99 exactly at its limit is within it", func(t *testing.T) {
		// 99 of every 100 fsyncs under 8 ms and one at 16 ms, with
		// buckets whose 99th rank is the 8 ms bucket's last: the p99 is
		// its bound, 8 ms, and the limit is set there.
		c := mcfg
		c.WALFsyncLimit = 8 * time.Millisecond
		v := swapplan.Judge(memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, 8*time.Millisecond, 198)
			observe(wal, 16*time.Millisecond, 2)
			observe(commit, time.Millisecond, 100)
		}), epoch, c)
		assert.InDelta(t, 8, v.WALFsyncP99Ms, 1e-9)
		assert.Equal(t, api.VerdictFit, v.State, v.Reason)
		assert.NotContains(t, v.Reason, "over 8ms")
	})
	t.Run("a bad sample weighs a thousand milliseconds in the score", func(t *testing.T) {
		s := memberWindow(5, func(_ int, wal, commit *api.Histogram) {
			observe(wal, 3*time.Millisecond, 200)
			observe(commit, time.Millisecond, 100)
		})
		s[1].Error = "etcd status: context deadline exceeded"
		v := swapplan.Judge(s, epoch, mcfg)
		assert.InDelta(t, 1003.98, v.Score, 0.001, "one bad sample and a WAL fsync p99 of 3.98 ms")
	})
}
