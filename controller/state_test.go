package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestEveryStatusSaysWhoLeadsTheDryRunTheWindowAndTheHolds(t *testing.T) {
	cfg := config.DefaultController()
	cfg.MaintenanceWindow = config.MaintenanceWindow{Days: []string{"sat", "sun"}, Start: "02:00", End: "05:00", TimeZone: "UTC"}
	cfg.Holds.KuredDaemonSet = "kube-system/kured"
	c := &Controller{cfg: cfg, plan: PlanConfig(cfg), identity: "replica-1"}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC) // a friday
	var st api.Status
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	require.NotNil(t, st.Controller)
	opens := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	assert.Equal(t, api.ControllerState{Leader: "replica-1", DryRun: true,
		Window:   &api.WindowState{Spec: "sun,sat 02:00-05:00 UTC", Open: false, Next: &opens},
		Holds:    []string{"kured's reboot lock (kube-system/kured)", "an upgrade Plan applying (in every namespace)"},
		HoldsOff: []string{"an alert active (holds.prometheus_url is empty)"}}, *st.Controller)

	held := []string{"kured's reboot lock is held by v2 (until 2026-12-04T13:00:00Z)"}
	c.statusChange(swapplan.Snapshot{Now: opens.Add(time.Hour), Holds: held}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.True(t, st.Controller.Window.Open)
	assert.Equal(t, time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC), *st.Controller.Window.Next)
	assert.Equal(t, held, st.Controller.Held)

	// The defaults, read where neither kured nor the Plans' CRD is there:
	// each off, saying why.
	def := config.DefaultController()
	h, err := newHolds(def.Holds, k8sfake.NewClientset(), prometheus.NewRegistry())
	require.NoError(t, err)
	c = &Controller{cfg: def, plan: PlanConfig(def), identity: "replica-2", holds: h}
	assert.Empty(t, h.check(context.Background(), swapplan.Snapshot{Now: now}, nil))
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.Nil(t, st.Controller.Window, "a window open always says nothing")
	assert.Empty(t, st.Controller.Holds)
	assert.Equal(t, []string{
		"kured's reboot lock (no kured DaemonSet found: none labelled app.kubernetes.io/name=kured or named kured)",
		"an upgrade Plan applying (the CRD plans.upgrade.cattle.io is not installed)",
		"an alert active (holds.prometheus_url is empty)",
	}, st.Controller.HoldsOff)

	// Every hold turned off: no reader at all, and status says so.
	def.Holds.KuredDaemonSet, def.Holds.UpgradePlansNamespace = config.HoldOff, config.HoldOff
	c = &Controller{cfg: def, plan: PlanConfig(def), identity: "replica-2"}
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.Empty(t, st.Controller.Holds)
	assert.Equal(t, []string{
		`kured's reboot lock (holds.kured_daemonset is "off")`,
		`an upgrade Plan applying (holds.upgrade_plans_namespace is "off")`,
		"an alert active (holds.prometheus_url is empty)",
	}, st.Controller.HoldsOff)
}

func TestTheStatusNamesTheRunnerPodsTheSwapWaitsOnAndForgetsThemAfter(t *testing.T) {
	c := &Controller{cfg: config.DefaultController(), plan: PlanConfig(config.DefaultController()), identity: "replica-1"}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var st api.Status
	pods := []string{"arc/runner-a", "arc/runner-b"}
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}, Step: api.StepRunnersOut, WaitingOn: pods}, nil)(&st, nil)
	assert.Equal(t, pods, st.WaitingOn)
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionDrainOut}, Step: api.StepDrainOut}, nil)(&st, nil)
	assert.Empty(t, st.WaitingOn)
}
