package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		Window: &api.WindowState{Spec: "sun,sat 02:00-05:00 UTC", Open: false, Next: &opens},
		Holds:  []string{"kured's reboot lock (kube-system/kured)"}}, *st.Controller)

	held := []string{"kured's reboot lock is held by v2 (until 2026-12-04T13:00:00Z)"}
	c.statusChange(swapplan.Snapshot{Now: opens.Add(time.Hour), Holds: held}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.True(t, st.Controller.Window.Open)
	assert.Equal(t, time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC), *st.Controller.Window.Next)
	assert.Equal(t, held, st.Controller.Held)

	c = &Controller{cfg: config.DefaultController(), plan: PlanConfig(config.DefaultController()), identity: "replica-2"}
	c.statusChange(swapplan.Snapshot{Now: now}, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.Nil(t, st.Controller.Window, "a window open always says nothing")
	assert.Empty(t, st.Controller.Holds)
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
