package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// The request is written while s1 stages the voters' settings; its staged
// cluster-cidr then changes, and the controller refuses the request
// naming the setting and both values, in its status and in a warning
// Event on s1, and cordons nothing; `fleet-role swap` then refuses to
// write such a request at all.
func TestAManualSwapToAStandbyWhoseStagedClusterCIDRDiffersIsRefusedNamingItInStatusAndAnEventOnTheStandby(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DryRun = false
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].K3sConfig.Critical["cluster-cidr"] = "10.44.0.0/16" })
	// Note: its agent's next probe (2 s) publishes it; 10 s is slack for
	// a busy machine.
	require.Eventually(t, func() bool {
		var p api.Probe
		return json.Unmarshal([]byte(e.node("s1").Annotations[api.AnnotationProbe]), &p) == nil &&
			p.K3sConfig != nil && p.K3sConfig.Critical["cluster-cidr"] == "10.44.0.0/16"
	}, 10*time.Second, 50*time.Millisecond, "s1's agent publishes its staged cluster-cidr")
	e.start()

	const why = "s1's staged cluster-cidr 10.44.0.0/16 differs from the voters' 10.42.0.0/16: k3s would refuse its join"
	var st api.Status
	// Note: the controller's first pass comes within its period (1 s) of
	// its start; 30 s, as the other tests here, is an outer limit.
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Reason == "the manual request to swap v1 for s1 is refused: "+why
	}, 30*time.Second, 100*time.Millisecond, "status: %s", st.Reason)
	var seen []string
	// Note: the event broadcaster writes the Event asynchronously, within
	// a second; 10 s is slack.
	require.Eventually(t, func() bool {
		events, err := e.api.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		seen = nil
		for _, ev := range events.Items {
			if ev.Source.Component == api.EventSourceController && ev.Reason == api.EventPreflightRefused {
				seen = append(seen, fmt.Sprintf("%s %s/%s: %s", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message))
			}
		}
		return len(seen) > 0
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, []string{"Warning Node/s1: " + why}, seen)
	assert.Nil(t, st.Swap, "no swap started")
	for _, n := range []string{"v1", "v2", "v3", "s1"} {
		assert.False(t, e.node(n).Spec.Unschedulable, "%s cordoned", n)
	}

	_, stderr, code = e.cli("swap", "--cancel")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = e.cli("swap", "v1", "s1")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, why)
}
