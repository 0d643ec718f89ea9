// Package platformtest is the conformance suite every platform backend
// runs: the same expectations of start, stop, state and their idempotence,
// whatever drives the units.
package platformtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/platform"
)

// Harness is a backend under test, on a host whose two units are stopped
// and do not start at boot.
type Harness struct {
	Platform platform.Platform
	// AgentServerURL reads the server URL the running agent unit was
	// given, from the host itself.
	AgentServerURL func(t *testing.T) string
	// Restart restarts a running unit behind the platform's back, as a
	// unit's restart policy would.
	Restart func(t *testing.T, u platform.Unit)
	// Enable leaves a unit as k3s's installer does, behind the platform's
	// back: running and started at boot (systemctl enable --now; a
	// container run with a restart policy that revives it).
	Enable func(t *testing.T, u platform.Unit)
}

// Suite runs the conformance tests; newHarness gives a fresh host for
// each test.
func Suite(t *testing.T, newHarness func(t *testing.T) Harness) {
	const url = "https://10.0.0.1:6443"
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t.Cleanup(cancel)
		return c
	}
	opts := func(u platform.Unit) platform.StartOptions {
		if u == platform.Agent {
			return platform.StartOptions{ServerURL: url}
		}
		return platform.StartOptions{}
	}

	t.Run("a stopped unit is inactive with no start", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			st, err := h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.False(t, st.Active, "%s", u)
			assert.False(t, st.Enabled, "%s does not start at boot", u)
			assert.True(t, st.StartedAt.IsZero(), "%s", u)
			assert.NotEmpty(t, st.Status)
			ok, err := h.Platform.Installed(ctx(t), u)
			require.NoError(t, err)
			assert.True(t, ok, "%s is installed", u)
		}
	})

	t.Run("start returns the start of the run and the state agrees", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			before := time.Now().Add(-2 * time.Second)
			started, err := h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err, "%s", u)
			assert.True(t, started.After(before), "%s started at %s", u, started)
			assert.True(t, started.Before(time.Now().Add(2*time.Second)))
			st, err := h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.True(t, st.Active, "%s", u)
			assert.WithinDuration(t, started, st.StartedAt, time.Second, "%s", u)
		}
	})

	t.Run("starting a running unit returns its recorded start, never an empty one, and does not restart it", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			first, err := h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err)
			time.Sleep(1100 * time.Millisecond)
			again, err := h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err)
			assert.False(t, again.IsZero())
			assert.WithinDuration(t, first, again, 500*time.Millisecond, "%s was not restarted", u)
		}
	})

	t.Run("stop is idempotent", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			require.NoError(t, h.Platform.Stop(ctx(t), u), "stop a unit never started")
			_, err := h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err)
			require.NoError(t, h.Platform.Stop(ctx(t), u))
			require.NoError(t, h.Platform.Stop(ctx(t), u), "stop a stopped unit")
			st, err := h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.False(t, st.Active)
			assert.True(t, st.StartedAt.IsZero())
		}
	})

	t.Run("start makes a unit start at boot and stop keeps it from it, as the state says", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			_, err := h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err, "%s", u)
			st, err := h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.True(t, st.Enabled, "%s starts at boot once started", u)
			_, err = h.Platform.Start(ctx(t), u, opts(u))
			require.NoError(t, err, "start a running unit")
			st, err = h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.True(t, st.Enabled, "%s still starts at boot", u)

			require.NoError(t, h.Platform.Stop(ctx(t), u))
			st, err = h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.False(t, st.Active, "%s", u)
			assert.False(t, st.Enabled, "%s does not start at boot once stopped", u)
			require.NoError(t, h.Platform.Stop(ctx(t), u), "stop a stopped unit")
			st, err = h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.False(t, st.Enabled, "%s", u)
		}
	})

	t.Run("a unit the installer left enabled is kept from starting at boot by stop", func(t *testing.T) {
		h := newHarness(t)
		for _, u := range platform.Units {
			h.Enable(t, u)
			st, err := h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			require.True(t, st.Enabled, "%s is enabled as the installer leaves it", u)
			require.NoError(t, h.Platform.Stop(ctx(t), u))
			st, err = h.Platform.State(ctx(t), u)
			require.NoError(t, err)
			assert.False(t, st.Active, "%s", u)
			assert.False(t, st.Enabled, "%s does not start at boot once stopped", u)
		}
	})

	t.Run("a start after a stop is a new run", func(t *testing.T) {
		h := newHarness(t)
		first, err := h.Platform.Start(ctx(t), platform.Server, platform.StartOptions{})
		require.NoError(t, err)
		require.NoError(t, h.Platform.Stop(ctx(t), platform.Server))
		time.Sleep(1100 * time.Millisecond)
		second, err := h.Platform.Start(ctx(t), platform.Server, platform.StartOptions{})
		require.NoError(t, err)
		assert.True(t, second.After(first), "%s after %s", second, first)
	})

	t.Run("the units are independent", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.Platform.Start(ctx(t), platform.Server, platform.StartOptions{})
		require.NoError(t, err)
		st, err := h.Platform.State(ctx(t), platform.Agent)
		require.NoError(t, err)
		assert.False(t, st.Active)
		_, err = h.Platform.Start(ctx(t), platform.Agent, opts(platform.Agent))
		require.NoError(t, err)
		require.NoError(t, h.Platform.Stop(ctx(t), platform.Server))
		st, err = h.Platform.State(ctx(t), platform.Agent)
		require.NoError(t, err)
		assert.True(t, st.Active)
	})

	t.Run("the agent unit joins the server it is given", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.Platform.Start(ctx(t), platform.Agent, platform.StartOptions{})
		assert.ErrorIs(t, err, platform.ErrNoServerURL)
		_, err = h.Platform.Start(ctx(t), platform.Agent, opts(platform.Agent))
		require.NoError(t, err)
		if h.AgentServerURL != nil {
			assert.Equal(t, url, h.AgentServerURL(t))
		}
		require.NoError(t, h.Platform.Stop(ctx(t), platform.Agent))
		_, err = h.Platform.Start(ctx(t), platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.2:6443"})
		require.NoError(t, err)
		if h.AgentServerURL != nil {
			assert.Equal(t, "https://10.0.0.2:6443", h.AgentServerURL(t), "a new start takes the new server")
		}
	})

	t.Run("a unit restarted behind the platform's back reports its new start", func(t *testing.T) {
		h := newHarness(t)
		first, err := h.Platform.Start(ctx(t), platform.Server, platform.StartOptions{})
		require.NoError(t, err)
		time.Sleep(1100 * time.Millisecond)
		h.Restart(t, platform.Server)
		st, err := h.Platform.State(ctx(t), platform.Server)
		require.NoError(t, err)
		assert.True(t, st.Active)
		assert.True(t, st.StartedAt.After(first), "the new run's start %s is after %s", st.StartedAt, first)
		again, err := h.Platform.Start(ctx(t), platform.Server, platform.StartOptions{})
		require.NoError(t, err)
		assert.WithinDuration(t, st.StartedAt, again, 500*time.Millisecond)
	})

	t.Run("an unknown unit is an error", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.Platform.Start(ctx(t), "etcd", platform.StartOptions{})
		assert.True(t, errors.Is(err, platform.ErrUnknownUnit))
		assert.ErrorIs(t, h.Platform.Stop(ctx(t), "etcd"), platform.ErrUnknownUnit)
	})

	t.Run("a cancelled context ends a call with an error, not a hang", func(t *testing.T) {
		h := newHarness(t)
		c, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := h.Platform.Start(c, platform.Server, platform.StartOptions{})
		assert.Error(t, err)
	})
}
