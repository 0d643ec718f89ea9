package main

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/k3sconfig"
)

// agentConfig is h2's configuration in a fleet of three servers, one of
// them at an IPv6 address.
func agentConfig(t *testing.T) config.Agent {
	cfg := config.DefaultAgent()
	cfg.NodeName = "h2"
	cfg.StateDir = t.TempDir()
	cfg.Servers = []config.Server{{Name: "h1", Address: "10.0.0.1"}, {Name: "h2", Address: "10.0.0.2"}, {Name: "h3", Address: "fd00::3"}}
	return cfg
}

func TestTheAgentsServersAreTheKubeconfigsThenTheInventorysAtTheHTTPSListenPortOfItsK3sConfig(t *testing.T) {
	cfg := agentConfig(t)
	s, err := agentServers(cfg, k3sconfig.Settings{HTTPSPort: 7443}, &rest.Config{Host: "https://10.0.0.9:7443"}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.9:7443", "10.0.0.1:7443", "[fd00::3]:7443"}, s.List(), "never this host's own, 10.0.0.2")
}

func TestTheAgentNeverTakesAnAddressItsK3sAdvertisesItsApiserverByForAnotherServer(t *testing.T) {
	cfg := agentConfig(t)
	cfg.Servers[1].Address = "fd00:0::2" // h2, written not as the EndpointSlice writes it
	k3s := k3sconfig.Settings{HTTPSPort: 6443, NodeIPs: []string{"192.168.1.2"}, NodeExternalIPs: []string{"203.0.113.2"},
		AdvertiseAddresses: []string{"198.51.100.2"}}
	s, err := agentServers(cfg, k3s, &rest.Config{Host: "https://10.0.0.1:6443"}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	// The `kubernetes` EndpointSlice lists every apiserver that serves,
	// this host's among them, by the address its k3s advertises.
	s.Set([]string{"203.0.113.2:6443", "192.168.1.2:6443", "198.51.100.2:6443", "[fd00::2]:6443", "10.0.0.1:6443", "[fd00::3]:6443"})
	assert.ElementsMatch(t, []string{"10.0.0.1:6443", "[fd00::3]:6443"}, s.List())
}

func TestTheAddressOfAServerASwapTakesOutIsAtTheHTTPSListenPort(t *testing.T) {
	address := inventoryAddress(agentConfig(t), 7443)
	assert.Equal(t, "10.0.0.1:7443", address("h1"))
	assert.Equal(t, "[fd00::3]:7443", address("h3"))
	assert.Empty(t, address("h9"), "a host the inventory does not name")
}
