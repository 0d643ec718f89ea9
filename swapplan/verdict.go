package swapplan

import (
	"fmt"
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
	// FsyncLimit and ReadLimit: a sample whose fsync p99 or linearizable
	// read took longer is bad. etcd's own disk guidance: WAL fsync p99
	// under 10 ms.
	FsyncLimit time.Duration
	ReadLimit  time.Duration
	// Period is the probe period, for a sample that does not say its own:
	// a host with no sample for 3 periods is silent.
	Period time.Duration
}

// Judge gives a host's verdict from its probe samples, oldest first, at
// now: silent when its last sample is older than 3 periods; partial (no
// verdict) on fewer than Window samples; else unfit when most of the last
// Window samples are bad (unhealthy, an error, fsync p99 or read over its
// limit), fit otherwise. The figures that led to it go with it. Score
// orders hosts of one state, higher worse: the bad samples first, then the
// median fsync p99.
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
		slow := s.FsyncP99Ms > limitMs
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
	v.Score = float64(bad)*1000 + v.FsyncP99Ms
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
	v.Reason = fmt.Sprintf("%s; fsync p99 median %.1f ms", detail, v.FsyncP99Ms)
	return v
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
