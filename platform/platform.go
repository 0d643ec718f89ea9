// Package platform is how the host agent starts and stops k3s's units:
// the server and the agent. A backend implements Platform; systemd drives
// systemd units over D-Bus, docker drives containers through the Docker
// API, fake keeps them in memory for tests, and platformtest is the one
// conformance suite every backend runs.
package platform

import (
	"context"
	"errors"
	"time"
)

// Unit is one of k3s's two units on a host.
type Unit string

// The units.
const (
	Server Unit = "server"
	Agent  Unit = "agent"
)

// Units lists both units.
var Units = []Unit{Server, Agent}

// State is a unit's state.
type State struct {
	// Active: the unit runs (or is starting).
	Active bool
	// Status is the backend's own word for it: active, inactive, failed,
	// running, exited, missing...
	Status string
	// StartedAt is the start of the unit's current run; zero when it
	// does not run.
	StartedAt time.Time
	// Enabled: the unit starts again by itself when the host boots (or
	// its engine restarts) — systemd's UnitFileState enabled, or a
	// container whose restart policy will revive it.
	Enabled bool
}

// StartOptions are what a start needs beside the unit.
type StartOptions struct {
	// ServerURL is the server the agent unit joins (K3S_URL).
	ServerURL string
}

// Platform starts and stops k3s's units on one host. Every method is
// idempotent: starting a running unit, or stopping a stopped one, changes
// nothing and is no error.
//
// Start and Stop also set what the host does at boot, so that a rebooted
// host comes back as its role says: k3s's installer enables its unit
// (WantedBy=multi-user.target), and a demoted server left enabled would
// start again at boot, find its tombstone, move its datastore aside and
// join as a new etcd member nobody asked for.
type Platform interface {
	// Start starts the unit and returns the start of its run, and makes
	// the unit start at boot. A unit that already runs is left running
	// (and made to start at boot) and the start recorded for it is
	// returned, never a zero time.
	Start(ctx context.Context, u Unit, opts StartOptions) (time.Time, error)
	// Stop stops the unit and keeps it from starting at boot. A stopped,
	// failed or missing unit is fine; a stopped unit left enabled (as
	// k3s's installer leaves it) is disabled.
	Stop(ctx context.Context, u Unit) error
	// State reads the unit's state.
	State(ctx context.Context, u Unit) (State, error)
	// Installed says the unit can be started on this host: its unit file,
	// or its image, is there.
	Installed(ctx context.Context, u Unit) (bool, error)
	// Close releases the backend's connections.
	Close() error
}

// ErrUnknownUnit is returned for a unit that is neither Server nor Agent.
var ErrUnknownUnit = errors.New("unknown unit")

// ErrNoServerURL is returned when the agent unit is started without the
// server it is to join.
var ErrNoServerURL = errors.New("the agent unit needs a server URL to join")

// Check returns ErrUnknownUnit for a unit that is neither Server nor Agent.
func Check(u Unit) error {
	if u != Server && u != Agent {
		return errors.Join(ErrUnknownUnit, errors.New(string(u)))
	}
	return nil
}
