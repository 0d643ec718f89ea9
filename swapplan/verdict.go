package swapplan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// VerdictConfig is how the controller judges a host's fitness.
type VerdictConfig struct {
	// Window is the number of samples a verdict needs; fewer is a partial
	// window, with no verdict.
	Window int
	// FsyncLimit: a sample of a host judged by the probe's own writes (a
	// standby, or a server whose agent does not read its member's
	// latencies) whose fsync p99 is over it is bad.
	FsyncLimit time.Duration
	// ReadLimit: a sample whose linearizable read took longer is bad.
	ReadLimit time.Duration
	// WALFsyncLimit and BackendCommitLimit: a host judged by its member's
	// own latencies is unfit when the p99 of either over the window is
	// over its limit. etcd's guidance: WAL fsync p99 under 10 ms, backend
	// commit p99 under 25 ms.
	WALFsyncLimit      time.Duration
	BackendCommitLimit time.Duration
	// Period is the probe period, for a sample that does not say its own:
	// a host with no sample for 3 periods is silent.
	Period time.Duration
}

// MinWrites is the fewest observations (WAL fsyncs, backend commits) a
// window must hold for their p99 to be judged. Note: the p99 of fewer than
// a hundred is their slowest, and one slow write of a few is no verdict
// on a disk; a k3s voter makes thousands in a window.
const MinWrites = 100

// Judge gives a host's verdict from its probe samples, oldest first, at
// now: silent when its last sample is older than 3 periods; partial (no
// verdict) on fewer than Window samples. Else a server whose agent reads
// its member's latencies (its last sample carries them) is unfit when its
// member's WAL fsync or backend commit p99 over the window is over its
// limit, or when most of the window's samples are bad (unhealthy, an
// error, a read over its limit); a host judged by the probe's writes (a
// standby) is unfit when most are bad, a probe fsync p99 over its limit
// being bad too. Fit otherwise. The figures that led to it go with it.
// Score orders hosts of one state, higher worse: the bad samples first,
// then the member's WAL fsync p99, or for a host judged by the probe, the
// median probe fsync p99.
func Judge(samples []api.Probe, now time.Time, c VerdictConfig) api.Verdict {
	if len(samples) == 0 {
		return api.Verdict{State: api.VerdictSilent, Reason: "no probe sample"}
	}
	last := samples[len(samples)-1]
	period := time.Duration(last.Period)
	if period <= 0 {
		period = c.Period
	}
	if age := now.Sub(last.At); age > 3*period {
		return api.Verdict{State: api.VerdictSilent, Reason: fmt.Sprintf("no probe sample for %s (3 periods of %s)", age.Round(time.Second), period)}
	}
	if len(samples) < c.Window {
		return api.Verdict{State: api.VerdictPartial, Samples: len(samples),
			Reason: fmt.Sprintf("%d of %d samples: no verdict on a partial window", len(samples), c.Window)}
	}
	window := samples[len(samples)-c.Window:]
	byMember := last.EtcdLatencies != nil
	limitMs := float64(c.FsyncLimit) / float64(time.Millisecond)
	readMs := float64(c.ReadLimit) / float64(time.Millisecond)
	var bad, unhealthy, errs, slowFsync, slowRead int
	fsync := make([]float64, 0, len(window))
	var reads []float64
	for _, s := range window {
		fsync = append(fsync, s.FsyncP99Ms)
		if s.RTTMs > 0 {
			reads = append(reads, s.RTTMs)
		}
		slow := !byMember && s.FsyncP99Ms > limitMs
		slowR := readMs > 0 && s.RTTMs > readMs
		if !s.Healthy {
			unhealthy++
		}
		if s.Error != "" {
			errs++
		}
		if slow {
			slowFsync++
		}
		if slowR {
			slowRead++
		}
		if !s.Healthy || s.Error != "" || slow || slowR {
			bad++
		}
	}
	v := api.Verdict{State: api.VerdictFit, Samples: len(window), Bad: bad, FsyncP99Ms: median(fsync), RTTMs: median(reads)}
	var why []string
	if slowFsync > 0 {
		why = append(why, fmt.Sprintf("fsync p99 over %s in %d", c.FsyncLimit, slowFsync))
	}
	if slowRead > 0 {
		why = append(why, fmt.Sprintf("reads over %s in %d", c.ReadLimit, slowRead))
	}
	if unhealthy > 0 {
		why = append(why, fmt.Sprintf("unhealthy in %d", unhealthy))
	}
	if errs > 0 {
		why = append(why, fmt.Sprintf("an error in %d", errs))
	}
	detail := fmt.Sprintf("%d of %d samples bad", bad, len(window))
	if len(why) > 0 {
		detail = strings.Join(why, ", ") + fmt.Sprintf(" of %d samples", len(window))
	}
	if bad*2 > len(window) {
		v.State = api.VerdictUnfit
	}
	if !byMember {
		v.Score = float64(bad)*1000 + v.FsyncP99Ms
		v.Reason = fmt.Sprintf("%s; fsync p99 median %.1f ms", detail, v.FsyncP99Ms)
		return v
	}
	l := judgeLatencies(window, c)
	v.WALFsyncP99Ms, v.BackendCommitP99Ms, v.Writes = l.walMs, l.commitMs, l.writes
	if l.over {
		v.State = api.VerdictUnfit
	}
	v.Score = float64(bad)*1000 + v.WALFsyncP99Ms
	v.Reason = l.reason + "; " + detail
	return v
}

// latencies is the verdict on a member's own latencies over a window.
type latencies struct {
	// walMs and commitMs are the p99s judged, 0 for one not judged;
	// writes is the WAL fsyncs over the window.
	walMs, commitMs float64
	writes          uint64
	// over says a p99 judged is over its limit.
	over   bool
	reason string
}

// judgeLatencies judges the member's latencies over the window, from the
// difference of its histograms in the window's first and last samples
// that carry them; if the member restarted meanwhile (its counts fell),
// from the first sample since. Too few writes, or histograms not read,
// are no verdict, and say so.
func judgeLatencies(window []api.Probe, c VerdictConfig) latencies {
	var with []*api.EtcdLatencies
	for _, s := range window {
		if s.EtcdLatencies != nil && s.EtcdLatencies.WALFsync != nil {
			with = append(with, s.EtcdLatencies)
		}
	}
	if len(with) < 2 {
		why := "fewer than two samples of the window carry them"
		if e := window[len(window)-1].EtcdLatencies; e != nil && e.Error != "" {
			why = e.Error
		}
		return latencies{reason: "no verdict on etcd's latencies: " + why}
	}
	lastL := with[len(with)-1]
	first := len(with) - 1
	for first > 0 {
		if _, ok := histogramDelta(with[first-1].WALFsync, with[first].WALFsync); !ok {
			break
		}
		first--
	}
	if first == len(with)-1 {
		return latencies{reason: "no verdict on etcd's latencies: the member restarted at the window's last sample"}
	}
	wal, _ := histogramDelta(with[first].WALFsync, lastL.WALFsync)
	l := latencies{writes: wal.Count}
	var parts []string
	judge := func(name string, h api.Histogram, limit time.Duration) (float64, bool) {
		if h.Count < MinWrites {
			parts = append(parts, fmt.Sprintf("%s not judged: %d in the window, fewer than %d", name, h.Count, MinWrites))
			return 0, false
		}
		p := quantile(0.99, h) * 1000
		if math.IsNaN(p) {
			parts = append(parts, name+" not judged: no finite bucket")
			return 0, false
		}
		p = math.Round(p*1000) / 1000
		over := p > float64(limit)/float64(time.Millisecond)
		s := fmt.Sprintf("%s p99 %.1f ms", name, p)
		if over {
			s += fmt.Sprintf(" over %s", limit)
		}
		parts = append(parts, s)
		return p, over
	}
	var overW, overC bool
	l.walMs, overW = judge("etcd's WAL fsync", wal, c.WALFsyncLimit)
	if commit, ok := histogramDelta(with[first].BackendCommit, lastL.BackendCommit); ok {
		l.commitMs, overC = judge("backend commit", commit, c.BackendCommitLimit)
	} else {
		parts = append(parts, "backend commit not judged: not read")
	}
	l.over = overW || overC
	l.reason = strings.Join(parts, ", ") + fmt.Sprintf(", over %d writes", wal.Count)
	if first > 0 {
		l.reason += " since the member restarted"
	}
	return l
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
