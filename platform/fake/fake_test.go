package fake_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/fake"
	"github.com/fleet-role/fleet-role/platform/platformtest"
)

func TestConformance(t *testing.T) {
	platformtest.Suite(t, func(t *testing.T) platformtest.Harness {
		p := fake.New(time.Now)
		return platformtest.Harness{
			Platform:       p,
			AgentServerURL: func(*testing.T) string { return p.URL() },
			Restart:        func(_ *testing.T, u platform.Unit) { p.Restart(u) },
			Enable: func(_ *testing.T, u platform.Unit) {
				p.Set(u, true, time.Now())
				p.SetEnabled(u, true)
			},
		}
	})
}

func TestARebootStartsOnlyTheUnitsEnabledAtBoot(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := fake.New(func() time.Time { return now })
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)
	require.NoError(t, p.Stop(ctx, platform.Server))

	now = now.Add(time.Minute)
	p.Reboot()
	server, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, server.Active, "the server stopped before the reboot stays stopped")
	agent, err := p.State(ctx, platform.Agent)
	require.NoError(t, err)
	assert.True(t, agent.Active, "the agent comes back")
	assert.Equal(t, now, agent.StartedAt, "as a new run")
	assert.Equal(t, "https://10.0.0.1:6443", p.URL())

	p.SetEnabled(platform.Server, true)
	p.Reboot()
	server, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, server.Active, "a server left enabled (as the installer leaves it) starts at boot")
}
