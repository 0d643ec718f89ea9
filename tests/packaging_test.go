package tests

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
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

var update = flag.Bool("update", false, "rewrite the generated packaging files")

// controllerConfigMap is packaging/kubernetes/controller-config.yaml: the
// controller's default configuration, dry run on, as its ConfigMap.
func controllerConfigMap() string {
	var b strings.Builder
	b.WriteString("# The controller's configuration (fleet-role config default controller):\n")
	b.WriteString("# dry run on. Generated: go test ./tests -run ConfigMap -update\n")
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fleet-role-controller-config\n  namespace: fleet-role\ndata:\n  controller.toml: |\n")
	for _, line := range strings.Split(strings.TrimRight(string(config.DefaultControllerTOML()), "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}

func TestThePackagedControllerConfigMapHoldsTheDefault(t *testing.T) {
	path := filepath.Join("..", "packaging", "kubernetes", "controller-config.yaml")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(controllerConfigMap()), 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, controllerConfigMap(), string(b), "regenerate: go test ./tests -run ConfigMap -update")
}
