package daemon

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/fake"
)

// BenchmarkEventToPlatformCall measures the time from a write on the host
// (the role file edited, k3s's tombstone written) to the platform call the
// agent makes for it, over 200 events each, and reports p50 and p99. The
// shell agent polled every few seconds.
func BenchmarkEventToPlatformCall(b *testing.B) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		event func(f *fixture, i int) (platform.Unit, string)
		reset func(f *fixture, i int)
	}{
		{"role-file", func(f *fixture) {
			f.staged()
			f.role("agent")
			f.plat.Set(platform.Agent, true, time.Now())
		}, func(f *fixture, i int) (platform.Unit, string) {
			if i%2 == 0 {
				f.role("server")
				return platform.Server, "start"
			}
			f.role("agent")
			return platform.Agent, "start"
		}, func(*fixture, int) {}},
		{"tombstone", func(f *fixture) {
			f.role("agent")
			f.datastore("h2-0a1b2c3d")
		}, func(f *fixture, i int) (platform.Unit, string) {
			f.tombstone()
			return platform.Server, "stop"
		}, func(f *fixture, i int) {
			deadline := time.Now().Add(5 * time.Second)
			for len(f.removedDirs()) == 0 || dirExists(f.etcdDir()) {
				if time.Now().After(deadline) {
					f.t.Fatalf("event %d: the datastore was not moved aside", i)
				}
				time.Sleep(time.Millisecond)
			}
			f.datastore(fmt.Sprintf("h2-%08x", i))
			time.Sleep(20 * time.Millisecond)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				t := &testing.T{}
				f := newFixture(t)
				f.t = t
				f.cfg.ResyncPeriod = time.Hour // the watches alone
				f.cfg.Debounce = config.DefaultAgent().Debounce
				tc.setup(f)
				f.start()
				calls := f.plat.Notify()
				time.Sleep(100 * time.Millisecond)
				drain(calls)
				var lat []time.Duration
				for i := range 200 {
					start := time.Now()
					unit, op := tc.event(f, i)
					c, ok := waitCall(calls, unit, op, 5*time.Second)
					if !ok {
						b.Fatalf("%s event %d: no %s of %s", tc.name, i, op, unit)
					}
					lat = append(lat, c.At.Sub(start))
					tc.reset(f, i)
					drain(calls)
				}
				f.stop()
				os.RemoveAll(f.dir)
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
			}
		})
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func drain(ch <-chan fake.Call) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func waitCall(ch <-chan fake.Call, u platform.Unit, op string, timeout time.Duration) (fake.Call, bool) {
	deadline := time.After(timeout)
	for {
		select {
		case c := <-ch:
			if c.Unit == u && c.Op == op {
				return c, true
			}
		case <-deadline:
			return fake.Call{}, false
		}
	}
}
