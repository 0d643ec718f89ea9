package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestAMaintenanceWindowIsOpenOnItsDaysBetweenItsTimesAndPastMidnightOnTheDayItOpened(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	weekdays := [7]bool{false, true, true, true, true, true, false}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("Mon 2006-01-02 15:04", s, berlin)
		require.NoError(t, err)
		return v.UTC() // the window reads it on its own clock
	}
	for _, tc := range []struct {
		name string
		w    swapplan.Window
		t    string
		open bool
	}{
		{"the zero window", swapplan.Window{}, "Sun 2026-11-29 03:00", true},
		{"inside", swapplan.Window{Days: weekdays, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin}, "Tue 2026-12-01 02:00", true},
		{"at its end", swapplan.Window{Days: weekdays, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin}, "Tue 2026-12-01 05:00", false},
		{"before it", swapplan.Window{Days: weekdays, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin}, "Tue 2026-12-01 01:59", false},
		{"not its day", swapplan.Window{Days: weekdays, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin}, "Sun 2026-11-29 03:00", false},
		{"a whole day", swapplan.Window{Days: weekdays, Location: berlin}, "Fri 2026-12-04 23:59", true},
		{"past midnight, opened on friday", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Sat 2026-12-05 03:00", true},
		{"past midnight, opened on sunday: no", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Mon 2026-11-30 03:00", false},
		{"past midnight, friday night", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Fri 2026-12-04 22:30", true},
		{"a whole day, not its day", swapplan.Window{Days: weekdays, Location: berlin}, "Sun 2026-11-29 12:00", false},
		{"a whole day of every day", swapplan.Window{Days: [7]bool{true, true, true, true, true, true, true}, Start: 3 * time.Hour, End: 3 * time.Hour, Location: berlin}, "Sun 2026-11-29 12:00", true},
		{"past midnight, at its start", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Fri 2026-12-04 22:00", true},
		{"past midnight, just before its start", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Fri 2026-12-04 21:59", false},
		{"past midnight, at its end", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Sat 2026-12-05 04:00", false},
		{"past midnight, opened on saturday: no", swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}, "Sun 2026-12-06 03:00", false},
	} {
		assert.Equal(t, tc.open, tc.w.Open(at(tc.t)), tc.name)
	}
	assert.Equal(t, "mon,tue,wed,thu,fri 22:00-04:00 Europe/Berlin",
		swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}.String())
}

func TestAMaintenanceWindowReadsTheClockToTheSecond(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04:05", "2026-12-01 "+s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		name       string
		start, end time.Duration
		t          string
		open       bool
	}{
		{"ten seconds after its start", 2 * time.Hour, 5 * time.Hour, "02:00:10", true},
		{"a quarter of an hour past its end", 2 * time.Hour, 2*time.Hour + 15*time.Minute, "02:30:00", false},
		{"ten seconds after a start half a minute past the hour", 2*time.Hour + 30*time.Second, 5 * time.Hour, "02:00:40", true},
		{"ten seconds before a start half a minute past the hour", 2*time.Hour + 30*time.Second, 5 * time.Hour, "02:00:20", false},
	} {
		w := swapplan.Window{Start: tc.start, End: tc.end, Location: time.UTC}
		assert.Equal(t, tc.open, w.Open(at(tc.t)), tc.name)
	}
}

func TestOutsideTheWindowTheAutomaticSwapWaitsAManualOneGoesAndOneStartedInsideFinishesOutside(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	open := w.now.UTC().Hour()
	w.cfg.Window = swapplan.Window{Start: time.Duration(open+1) % 24 * time.Hour, End: time.Duration(open+2) % 24 * time.Hour, Location: time.UTC}
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "the automatic decision to swap v2 for s1 waits for the maintenance window (every day")

	w.requestSwap("v1", "s2")
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, "a manual swap starts at any time: %s", plan.Reason)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)

	// Inside the window the automatic swap starts, and goes on once the
	// window has closed.
	w.status.CooldownUntil = nil
	w.cfg.Window.Start, w.cfg.Window.End = time.Duration(w.now.UTC().Hour())*time.Hour, time.Duration(w.now.UTC().Hour()+1)%24*time.Hour
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "v2", plan.Swap.Out)
	w.cfg.Window.Start, w.cfg.Window.End = w.cfg.Window.End, w.cfg.Window.End+time.Hour
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestAMaintenanceWindowSaysWhenItNextOpensOrCloses(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	weekdays := [7]bool{false, true, true, true, true, true, false}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("Mon 2006-01-02 15:04", s, berlin)
		require.NoError(t, err)
		return v.UTC()
	}
	night := swapplan.Window{Days: weekdays, Start: 22 * time.Hour, End: 4 * time.Hour, Location: berlin}
	early := swapplan.Window{Days: weekdays, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin}
	for _, tc := range []struct {
		name string
		w    swapplan.Window
		t    string
		next string
	}{
		{"closed, opens the same day", early, "Tue 2026-12-01 01:00", "Tue 2026-12-01 02:00"},
		{"open, closes at its end", early, "Tue 2026-12-01 03:00", "Tue 2026-12-01 05:00"},
		{"closed after friday's, opens on monday", early, "Fri 2026-12-04 06:00", "Mon 2026-12-07 02:00"},
		{"open past midnight, closes the next morning", night, "Fri 2026-12-04 23:00", "Sat 2026-12-05 04:00"},
		{"closed on saturday night, opens on monday night", night, "Sat 2026-12-05 23:00", "Mon 2026-12-07 22:00"},
		{"a whole day, closes at midnight", swapplan.Window{Days: weekdays, Start: 3 * time.Hour, End: 3 * time.Hour, Location: berlin},
			"Fri 2026-12-04 12:00", "Sat 2026-12-05 00:00"},
		{"times to the minute", swapplan.Window{Days: weekdays, Start: 9*time.Hour + 30*time.Minute, End: 17*time.Hour + 45*time.Minute, Location: berlin},
			"Tue 2026-12-01 12:00", "Tue 2026-12-01 17:45"},
		{"across the change to summer time", swapplan.Window{Days: [7]bool{true}, Start: 2 * time.Hour, End: 5 * time.Hour, Location: berlin},
			"Sun 2027-03-28 01:00", "Sun 2027-03-28 03:00"},
	} {
		next, ok := tc.w.Next(at(tc.t))
		require.True(t, ok, tc.name)
		assert.Equal(t, at(tc.next), next.UTC(), tc.name)
		assert.NotEqual(t, tc.w.Open(at(tc.t)), tc.w.Open(next), "%s: it changes then", tc.name)
	}
	_, ok := swapplan.Window{}.Next(at("Fri 2026-12-04 12:00"))
	assert.False(t, ok, "open always: no change")
	_, ok = swapplan.Window{Days: weekdays, Start: time.Hour, End: time.Hour}.Next(at("Fri 2026-12-04 12:00"))
	assert.True(t, ok, "whole weekdays close on saturday")
}
