package swapplan

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Window is when an automatic swap may start, as kured's reboot window
// is given: on its days, from Start to End, times of day on the clock of
// Location. A window whose End is before its Start runs past midnight, on
// the day it opened; one whose End is its Start lasts the whole day. A
// swap started inside goes on outside; a manual one starts at any time.
// The zero Window is open always.
type Window struct {
	// Days by time.Weekday; none set is every day.
	Days       [7]bool
	Start, End time.Duration // since midnight
	Location   *time.Location
}

// Always says the window never closes.
func (w Window) Always() bool {
	return w.Start == w.End && (w.Days == [7]bool{} || w.Days == [7]bool{true, true, true, true, true, true, true})
}

// Open says whether t is inside the window.
func (w Window) Open(t time.Time) bool {
	if w.Always() {
		return true
	}
	if w.Location != nil {
		t = t.In(w.Location)
	}
	day := t.Weekday()
	on := func(d time.Weekday) bool { return w.Days == [7]bool{} || w.Days[d] }
	clock := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	switch {
	case w.Start == w.End:
		return on(day)
	case w.Start < w.End:
		return on(day) && w.Start <= clock && clock < w.End
	case clock >= w.Start:
		return on(day)
	case clock < w.End:
		return on((day + 6) % 7) // opened the day before
	}
	return false
}

// String writes the window as a person reads it: "mon,tue 02:00-05:00
// Europe/Berlin".
func (w Window) String() string {
	var days []string
	for d, on := range w.Days {
		if on {
			days = append(days, strings.ToLower(time.Weekday(d).String()[:3]))
		}
	}
	if len(days) == 0 || len(days) == 7 {
		days = []string{"every day"}
	}
	loc := "UTC"
	if w.Location != nil {
		loc = w.Location.String()
	}
	hm := func(d time.Duration) string { return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60) }
	return fmt.Sprintf("%s %s-%s %s", strings.Join(days, ","), hm(w.Start), hm(w.End), loc)
}

// Next is when the window next opens, if it is closed at t, or closes,
// if it is open; false when it never changes (open always, or never
// open). The window changes only at its start, its end or midnight on
// some day, so those of the next eight days are the candidates.
func (w Window) Next(t time.Time) (time.Time, bool) {
	if w.Always() {
		return time.Time{}, false
	}
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, loc)
	var candidates []time.Time
	for d := 0; d <= 8; d++ {
		day := midnight.AddDate(0, 0, d)
		for _, at := range []time.Duration{0, w.Start, w.End} {
			// On the day's clock, as Open reads it (a day of a DST change
			// included).
			c := time.Date(day.Year(), day.Month(), day.Day(), int(at/time.Hour), int(at%time.Hour/time.Minute), 0, 0, loc)
			if c.After(t) {
				candidates = append(candidates, c)
			}
		}
	}
	slices.SortFunc(candidates, func(a, b time.Time) int { return a.Compare(b) })
	open := w.Open(t)
	for _, c := range candidates {
		if w.Open(c) != open {
			return c, true
		}
	}
	return time.Time{}, false
}
