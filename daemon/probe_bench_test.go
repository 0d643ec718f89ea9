package daemon

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// BenchmarkProbeSample is the probe's own cost per sample, in CPU time
// (this process's, user and system), and what it is of one core at the
// default 60s period: on an agent (the disk alone) and on a server (the
// disk and its etcd, a real member of a real cluster).
func BenchmarkProbeSample(b *testing.B) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(b *testing.B, e Etcd, server bool) {
		p := newProber(b.TempDir(), config.DefaultAgent().Probe, time.Minute, e)
		defer p.close()
		p.sample(context.Background(), time.Now(), server, false) // warm: the file, the connection
		start := cpu()
		for b.Loop() {
			p.sample(context.Background(), time.Now(), server, false)
		}
		per := (cpu() - start) / time.Duration(b.N)
		b.ReportMetric(float64(per.Microseconds()), "cpu-us/sample")
		b.ReportMetric(float64(per)/float64(time.Minute)*100, "%core-at-60s")
	}
	b.Run("agent", func(b *testing.B) { run(b, &fakeEtcd{}, false) })
	b.Run("server", func(b *testing.B) {
		ms := kubeapi.StartEtcdCluster(b, 3)
		c, err := etcdclient.New(etcdclient.Config{Endpoint: ms[0].ClientURL, Timeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c, true)
	})
}
