// Package fake is an in-memory platform for tests: it keeps the units'
// states, records every call, and blocks the calls it is told to. As the
// real backends do, Start makes a unit start at boot and Stop keeps it
// from doing so; Reboot starts again the units enabled at boot.
package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fleet-role/fleet-role/platform"
)

// Call is one call made to the platform.
type Call struct {
	Op   string // start, stop
	Unit platform.Unit
	URL  string
	At   time.Time
}

// Platform is the fake. The zero value is not usable; use New.
type Platform struct {
	mu     sync.Mutex
	now    func() time.Time
	units  map[platform.Unit]*unit
	calls  []Call
	block  map[string]chan struct{}
	fail   map[string]error
	notify chan Call
}

type unit struct {
	active  bool
	enabled bool
	started time.Time
	url     string
}

// New returns a fake with both units stopped and installed; now is its clock.
func New(now func() time.Time) *Platform {
	return &Platform{
		now:   now,
		units: map[platform.Unit]*unit{platform.Server: {}, platform.Agent: {}},
		block: map[string]chan struct{}{},
		fail:  map[string]error{},
	}
}

// Fail makes the calls of op ("start", "stop") on the unit fail with err,
// after any block, changing nothing, as a unit whose start job fails
// would, until restore is called. The calls are recorded all the same.
func (p *Platform) Fail(op string, u platform.Unit, err error) (restore func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[op+"/"+string(u)] = err
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.fail, op+"/"+string(u))
	}
}

// Block makes the next calls of op ("start", "stop") on the unit wait
// until release is called or their context ends, as a slow or hung unit
// would.
func (p *Platform) Block(op string, u platform.Unit) (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	p.block[op+"/"+string(u)] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.block, op+"/"+string(u))
			p.mu.Unlock()
			close(ch)
		})
	}
}

// wait blocks a call while it is blocked.
func (p *Platform) wait(ctx context.Context, op string, u platform.Unit) error {
	p.mu.Lock()
	ch := p.block[op+"/"+string(u)]
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Notify returns a channel that receives every start and stop call.
func (p *Platform) Notify() <-chan Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.notify == nil {
		p.notify = make(chan Call, 1024)
	}
	return p.notify
}

// Set puts a unit in a state, as the host was found: a running unit as
// its installer left it, enabled at boot; a stopped one not.
func (p *Platform) Set(u platform.Unit, active bool, started time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.units[u].active, p.units[u].started, p.units[u].enabled = active, started, active
}

// SetEnabled makes a unit start at boot, or not, behind the platform's
// back: as k3s's installer leaves its unit enabled.
func (p *Platform) SetEnabled(u platform.Unit, enabled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.units[u].enabled = enabled
}

// Reboot is the host booting again: every unit stops, and the units
// enabled at boot start anew, the agent with the server URL it last had.
func (p *Platform) Reboot() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, s := range p.units {
		s.active, s.started = s.enabled, time.Time{}
		if s.enabled {
			s.started = now
		}
	}
}

// Restart restarts a running unit behind the platform's back, as a unit's
// restart policy would.
func (p *Platform) Restart(u platform.Unit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.units[u]; s.active {
		s.started = p.now()
	}
}

// Calls returns the start and stop calls so far.
func (p *Platform) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

// URL returns the server URL the agent unit was last started with.
func (p *Platform) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.units[platform.Agent].url
}

func (p *Platform) record(c Call) {
	p.calls = append(p.calls, c)
	if p.notify != nil {
		select {
		case p.notify <- c:
		default:
		}
	}
}

// Start implements platform.Platform.
func (p *Platform) Start(ctx context.Context, u platform.Unit, opts platform.StartOptions) (time.Time, error) {
	if err := platform.Check(u); err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if err := p.wait(ctx, "start", u); err != nil {
		return time.Time{}, fmt.Errorf("start %s: %w", u, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Call{Op: "start", Unit: u, URL: opts.ServerURL, At: p.now()}
	p.record(c)
	if err := p.fail["start/"+string(u)]; err != nil {
		return time.Time{}, fmt.Errorf("start %s: %w", u, err)
	}
	if u == platform.Agent && opts.ServerURL == "" {
		return time.Time{}, platform.ErrNoServerURL
	}
	s := p.units[u]
	s.enabled = true
	if !s.active {
		s.active, s.started = true, c.At
		if u == platform.Agent {
			s.url = opts.ServerURL
		}
	}
	return s.started, nil
}

// Stop implements platform.Platform.
func (p *Platform) Stop(ctx context.Context, u platform.Unit) error {
	if err := platform.Check(u); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.wait(ctx, "stop", u); err != nil {
		return fmt.Errorf("stop %s: %w", u, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record(Call{Op: "stop", Unit: u, At: p.now()})
	if err := p.fail["stop/"+string(u)]; err != nil {
		return fmt.Errorf("stop %s: %w", u, err)
	}
	s := p.units[u]
	s.active, s.enabled, s.started = false, false, time.Time{}
	return nil
}

// State implements platform.Platform.
func (p *Platform) State(ctx context.Context, u platform.Unit) (platform.State, error) {
	if err := platform.Check(u); err != nil {
		return platform.State{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.units[u]
	st := platform.State{Active: s.active, Enabled: s.enabled, Status: "inactive", StartedAt: s.started}
	if s.active {
		st.Status = "active"
	}
	return st, nil
}

// Installed implements platform.Platform.
func (p *Platform) Installed(ctx context.Context, u platform.Unit) (bool, error) {
	if err := platform.Check(u); err != nil {
		return false, err
	}
	return true, nil
}

// Close implements platform.Platform.
func (p *Platform) Close() error { return nil }
