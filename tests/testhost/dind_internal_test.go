package testhost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestADockerHostIsRefusedANetworkNamespaceItWouldShare(t *testing.T) {
	for _, args := range [][]string{
		{"--network", "host"},
		{"-v", "/a:/b", "--net", "host"},
		{"--network=host"},
		{"--net=container:other"},
		{"--network", "container:other"},
	} {
		assert.Error(t, ownNetwork(args), "%q", args)
	}
	for _, args := range [][]string{
		nil,
		{"--network", "fleet-role-test-net-1", "--ip", "10.78.1.10"},
		{"--network=bridge"},
		{"-v", "host:/host"},
		{"--network"},
	} {
		assert.NoError(t, ownNetwork(args), "%q", args)
	}
}
