package api_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
)

func TestParseHostRole(t *testing.T) {
	for in, want := range map[string]api.HostRole{"server": api.HostServer, "agent\n": api.HostAgent, "  server \n": api.HostServer} {
		got, err := api.ParseHostRole([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"", "voter", "server agent", "\x00\x01"} {
		_, err := api.ParseHostRole([]byte(in))
		assert.True(t, errors.Is(err, api.ErrCorruptRoleFile), "%q", in)
	}
	assert.Equal(t, "agent\n", string(api.HostAgent.Bytes()))
}

func TestEventSwapReasonIsTheActionInTitleCase(t *testing.T) {
	for action, want := range map[string]string{
		api.ActionStart: "SwapStart", api.ActionCordonIn: "SwapCordonIn", api.ActionRemoveByVoter: "SwapRemoveByVoter", api.ActionEnd: "SwapEnd",
		api.ActionClearFinished: "SwapClearFinished",
	} {
		assert.Equal(t, want, api.EventSwapReason(action))
	}
}

func TestEveryActionNamesAStepButNoneAndTheClearOfAFinishedDemotion(t *testing.T) {
	for _, a := range []string{api.ActionStart, api.ActionSnapshot, api.ActionCordonIn, api.ActionDrainIn, api.ActionPromote,
		api.ActionCordonOut, api.ActionDrainOut, api.ActionStepDown, api.ActionRemoveMember, api.ActionMemberGone, api.ActionCleanUp,
		api.ActionUncordon, api.ActionEnd, api.ActionRollback, api.ActionAbandon, api.ActionRemoveByVoter, api.ActionStuck} {
		assert.Contains(t, api.Steps, a)
	}
	for _, a := range []string{api.ActionNone, api.ActionClearFinished} {
		assert.NotContains(t, api.Steps, a, "taken with no swap under way")
	}
}
