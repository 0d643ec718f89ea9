package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-role/fleet-role/api"
)

// metrics are the agent's Prometheus metrics: its probe samples, the
// decisions it carried out and how they went, its file watch, and how long
// it took from a change to acting on it.
type metrics struct {
	fsync     prometheus.Gauge
	read      prometheus.Gauge
	healthy   prometheus.Gauge
	samples   *prometheus.CounterVec
	actions   *prometheus.CounterVec
	took      prometheus.Histogram
	reaction  prometheus.Histogram
	fileEvent prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		fsync: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_agent_probe_fsync_p99_seconds",
			Help: "The last probe sample's fsync p99 in the data dir."}),
		read: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_agent_probe_read_seconds",
			Help: "The last probe sample's linearizable read through the local etcd (a server's); 0 without one."}),
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_agent_probe_healthy",
			Help: "1 when the last probe sample was healthy."}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_agent_probe_samples_total",
			Help: "Probe samples taken, by result: healthy, unhealthy, or error (something could not be sampled)."}, []string{"result"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_agent_actions_total",
			Help: "Decisions the agent carried out (promote, demote, finish, ...), by outcome: done or failed."}, []string{"action", "outcome"}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_role_agent_action_seconds",
			Help: "How long a decision's steps took.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 9)}),
		reaction: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_role_agent_reaction_seconds",
			Help:    "From the change that woke the agent (a request, the role file, the datastore) to the start of the steps it led to.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		fileEvent: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_role_agent_file_events_total",
			Help: "Bursts of file events (the role file's directory, the datastore's) that woke the agent."}),
	}
	reg.MustRegister(m.fsync, m.read, m.healthy, m.samples, m.actions, m.took, m.reaction, m.fileEvent)
	return m
}

// sampled records a probe sample.
func (m *metrics) sampled(s api.Probe) {
	m.fsync.Set(s.FsyncP99Ms / 1000)
	m.read.Set(s.RTTMs / 1000)
	result := "unhealthy"
	switch {
	case s.Error != "":
		result = "error"
	case s.Healthy:
		result = "healthy"
	}
	if s.Healthy {
		m.healthy.Set(1)
	} else {
		m.healthy.Set(0)
	}
	m.samples.WithLabelValues(result).Inc()
}
