package fake_test

import (
	"testing"
	"time"

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
		}
	})
}
