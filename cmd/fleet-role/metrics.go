package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry is a process's Prometheus registry: the Go runtime's and
// the process's collectors, and fleet_role_build_info, beside the
// metrics of the agent or the controller.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	b := build()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "fleet_role_build_info",
		Help:        "1, labelled with the version, the commit and the Go version of the running binary.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info)
	return reg
}
