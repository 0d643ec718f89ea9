package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/config"
)

func TestThePackagedControllerConfigurationIsTheDefault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "packaging", "controller.toml"))
	require.NoError(t, err)
	assert.Equal(t, string(config.DefaultControllerTOML()), string(b), "regenerate: go run ./cmd/fleet-role config default controller > packaging/controller.toml")
}

func TestThePackagedAgentConfigurationIsTheDefaultAndValid(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "packaging", "agent.toml"))
	require.NoError(t, err)
	assert.Equal(t, string(config.DefaultAgentTOML()), string(b), "regenerate: go run ./cmd/fleet-role config default agent > packaging/agent.toml")
	_, err = config.ParseAgent(b)
	assert.NoError(t, err)
}
