package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/config"
)

func TestAnAgentConfigThatSetsTheDeprecatedProbeFsyncLimitStillLoadsAndSaysItIsIgnored(t *testing.T) {
	data := strings.Replace(string(config.DefaultAgentTOML()), "[probe]\n", "[probe]\nfsync_limit = \"25ms\"\n", 1)
	a, err := config.ParseAgent([]byte(data))
	require.NoError(t, err)
	assert.Equal(t, 25*time.Millisecond, a.Probe.FsyncLimit, "parsed")
	require.Len(t, a.Deprecated(), 1)
	assert.Contains(t, a.Deprecated()[0], "probe.fsync_limit is ignored: the controller's verdicts.fsync_limit")
}

func TestTheDefaultAgentConfigSetsNoDeprecatedKey(t *testing.T) {
	a, err := config.ParseAgent(config.DefaultAgentTOML())
	require.NoError(t, err)
	assert.Empty(t, a.Deprecated())
}
