package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheRegistryCarriesTheBuildInfoAndTheRuntimesCollectors(t *testing.T) {
	linked(t, "0.4.0", "abc1234", "2026-11-30T12:00:00Z")
	families, err := newRegistry().Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetName() != "fleet_role_build_info" {
			continue
		}
		m := f.GetMetric()[0]
		assert.Equal(t, 1.0, m.GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, map[string]string{"version": "0.4.0", "commit": "abc1234", "goversion": runtime.Version()}, labels)
	}
	for _, want := range []string{"fleet_role_build_info", "go_goroutines", "process_resident_memory_bytes"} {
		assert.True(t, names[want], want)
	}
}
