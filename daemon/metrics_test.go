package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
)

func TestTheProbeGaugesFollowEachSampleInjectedAndTheSamplesAreCountedByResult(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.sampled(api.Probe{Healthy: true, FsyncP99Ms: 2.5, RTTMs: 1.5})
	assert.Equal(t, 1.0, testutil.ToFloat64(m.healthy), "a healthy sample")
	assert.Equal(t, 0.0025, testutil.ToFloat64(m.fsync))
	assert.Equal(t, 0.0015, testutil.ToFloat64(m.read))

	m.sampled(api.Probe{Healthy: false, FsyncP99Ms: 40})
	assert.Equal(t, 0.0, testutil.ToFloat64(m.healthy), "an unhealthy sample")
	assert.Equal(t, 0.04, testutil.ToFloat64(m.fsync))

	m.sampled(api.Probe{Healthy: false, Error: "etcd: context deadline exceeded"})
	assert.Equal(t, 0.0, testutil.ToFloat64(m.healthy), "a sample that could not be taken")
	m.sampled(api.Probe{Healthy: true})
	assert.Equal(t, 1.0, testutil.ToFloat64(m.healthy), "healthy again")

	for result, want := range map[string]float64{"healthy": 2, "unhealthy": 1, "error": 1} {
		assert.Equal(t, want, testutil.ToFloat64(m.samples.WithLabelValues(result)), result)
	}
}
