package swapplan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
)

// stage gives the host's staged k3s server config a value of a setting;
// its next probe publishes it.
func (w *world) stage(host, setting, value string) {
	w.Hosts[host].K3sConfig.Critical[setting] = value
}

// manualRefused asks for the swap of out for in and checks that every way
// of asking refuses it with the reason why alone: `fleet-role swap`'s
// check, its dry run, and the planner, which waits without cordoning
// anything.
func manualRefused(t *testing.T, w *world, out, in, why string) {
	t.Helper()
	w.pass() // the hosts' probes publish what they stage
	assert.EqualError(t, swapplan.CheckRequest(w.snapshot(), out, in, nil), why)
	q := api.ManualRequest{Out: out, In: in, At: w.now, By: "test"}
	assert.Equal(t, []string{"is refused: " + why}, swapplan.Obstacles(w.snapshot(), q))
	refused, _ := swapplan.Preflight(w.snapshot(), out, in)
	assert.Equal(t, why, refused)
	w.request = &q
	for range 3 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Equal(t, "the manual request to swap "+out+" for "+in+" is refused: "+why, plan.Reason)
		assert.Equal(t, []swapplan.PreflightRefusal{{Node: in, Reason: why}}, plan.Refused, "for the controller's Event on "+in)
	}
	for _, n := range w.nodes {
		assert.False(t, n.Unschedulable, "%s cordoned", n.Name)
	}
}

func TestAManualSwapIsRefusedWhenTheCandidatesStagedK3sSettingDiffersFromTheVotersNamingTheSettingAndBothValues(t *testing.T) {
	for _, tc := range []struct{ setting, staged, voters string }{
		{"cluster-cidr", "10.44.0.0/16", "10.42.0.0/16"},
		{"service-cidr", "10.96.0.0/12", "10.43.0.0/16"},
		{"cluster-dns", "10.43.0.53", "10.43.0.10"},
		{"flannel-backend", "wireguard-native", "vxlan"},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.stage("s1", tc.setting, tc.staged)
			manualRefused(t, w, "v1", "s1",
				"s1's staged "+tc.setting+" "+tc.staged+" differs from the voters' "+tc.voters+": k3s would refuse its join")
		})
	}
}

func TestARefusedSwapNamesEveryStagedK3sSettingThatDiffersInOrder(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.stage("s1", "flannel-backend", "host-gw")
	w.stage("s1", "cluster-cidr", "10.44.0.0/16")
	manualRefused(t, w, "v1", "s1", "s1's staged cluster-cidr 10.44.0.0/16 differs from the voters' 10.42.0.0/16; "+
		"s1's staged flannel-backend host-gw differs from the voters' vxlan: k3s would refuse its join")
}

func TestAManualSwapIsRefusedWhenTheCandidatesTokenPinsAnotherClusterCA(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	other := strings.Repeat("ab", 32)
	w.Hosts["s1"].K3sConfig.TokenCAHash = other
	manualRefused(t, w, "v1", "s1", "s1's staged token pins the cluster CA hash "+other+
		", which differs from the voters' "+fleetmodel.ModelCAHash+": k3s would refuse its join")
}

func TestThePreflightComparesWithTheVotersButOutAndNamesTheVoterThatDiffers(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.stage("v1", "cluster-domain", "old.local") // OUT: never the server the candidate joins through
	w.stage("s1", "cluster-domain", "cluster.local")
	w.stage("v2", "cluster-domain", "cluster.local")
	w.stage("v3", "cluster-domain", "other.local")
	manualRefused(t, w, "v1", "s1", "s1's staged cluster-domain cluster.local differs from v3's other.local: k3s would refuse its join")

	w = newWorld(t, 3, 1, 0)
	w.stage("v1", "cluster-domain", "old.local")
	w.pass()
	assert.Empty(t, swapplan.Obstacles(w.snapshot(), api.ManualRequest{Out: "v1", In: "s1", At: w.now}), "only OUT holds another value")
}

func TestAnUnknownK3sConfigDoesNotRefuseTheSwapButItsStartSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(w *world)
		wants string
	}{
		{"an older candidate agent", func(w *world) { w.Hosts["s1"].K3sConfig = nil },
			"s1's agent publishes no k3s server config (an older agent): its settings are not compared with the voters'"},
		{"a config the candidate could not read", func(w *world) {
			w.Hosts["s1"].K3sConfig = &api.K3sConfig{Error: "/etc/rancher/k3s/config.yaml: yaml: line 2: did not find expected key"}
		}, "s1's staged k3s server config could not be read (/etc/rancher/k3s/config.yaml: yaml: line 2: did not find expected key): " +
			"its settings are not compared with the voters'"},
		{"a token the candidate could not read", func(w *world) {
			w.Hosts["s1"].K3sConfig.TokenCAHash = ""
			w.Hosts["s1"].K3sConfig.TokenError = "token-file: open /etc/rancher/k3s/token: permission denied"
		}, "s1's token could not be read (token-file: open /etc/rancher/k3s/token: permission denied): its cluster CA is not compared with the voters'"},
		{"older voter agents", func(w *world) {
			for _, v := range []string{"v1", "v2", "v3"} {
				w.Hosts[v].K3sConfig = nil
			}
		}, "no voter publishes its k3s server config: s1's staged settings are compared with nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			tc.set(w)
			w.pass()
			refused, unknown := swapplan.Preflight(w.snapshot(), "v1", "s1")
			assert.Empty(t, refused)
			assert.Equal(t, tc.wants, unknown)
			assert.Empty(t, swapplan.Obstacles(w.snapshot(), api.ManualRequest{Out: "v1", In: "s1", At: w.now}))
			w.requestSwap("v1", "s1")
			plan := w.pass()
			require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
			assert.True(t, strings.HasSuffix(plan.Reason, "; preflight: "+tc.wants), plan.Reason)
		})
	}
}

func TestAMatchingK3sConfigStartsTheSwapWithNoPreflightNote(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.pass()
	refused, unknown := swapplan.Preflight(w.snapshot(), "v1", "s1")
	assert.Empty(t, refused)
	assert.Empty(t, unknown)
	w.requestSwap("v1", "s1")
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.NotContains(t, plan.Reason, "preflight")
	assert.Empty(t, plan.Refused)
}

func TestTheAutomaticChoicePassesOverAStandbyWhoseStagedK3sSettingDiffers(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.node("s1").Verdict.Score = 0.5 // the fittest
	w.stage("s1", "cluster-cidr", "10.44.0.0/16")
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "s2", plan.Swap.In)
	assert.Equal(t, []swapplan.PreflightRefusal{{Node: "s1", Reason: "s1's staged cluster-cidr 10.44.0.0/16 differs from the voters' 10.42.0.0/16: k3s would refuse its join"}},
		plan.Refused)

	w = newWorld(t, 3, 1, 0)
	w.stage("s1", "cluster-cidr", "10.44.0.0/16")
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Equal(t, "no swap: the voter v2 is unfit (fsync p99 40 ms) but no standby is eligible: "+
		"s1's staged cluster-cidr 10.44.0.0/16 differs from the voters' 10.42.0.0/16: k3s would refuse its join", plan.Reason)
}

func TestAVoterThatPublishesNoValueOfASettingIsLeftOutOfItsComparison(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	delete(w.Hosts["v2"].K3sConfig.Critical, "flannel-backend") // an agent that knows fewer settings
	w.pass()
	refused, unknown := swapplan.Preflight(w.snapshot(), "v1", "s1")
	assert.Empty(t, refused)
	assert.Empty(t, unknown)
	w.stage("s1", "flannel-backend", "host-gw")
	manualRefused(t, w, "v1", "s1", "s1's staged flannel-backend host-gw differs from the voters' vxlan: k3s would refuse its join")
}
