package controller_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// metric returns the line of the controller's metric, "" when it serves
// none.
func (e *env) metric(name string) string {
	rec := httptest.NewRecorder()
	e.ctrl.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// nodeEvents are the reasons of the controller's Events on the Node, and
// their messages.
func (e *env) nodeEvents(node string) map[string]string {
	list, err := e.api.Client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	require.NoError(e.t, err)
	out := map[string]string{}
	for _, ev := range list.Items {
		if ev.Source.Component == api.EventSourceController {
			out[ev.Reason] = ev.Type + ": " + ev.Message
		}
	}
	return out
}

func TestARollbackWhoseCandidateNeverFinishesEndsPendingKeepingItsAnnotationsUntilItsFinishIsReportedThenClearsThem(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.d.With(func(d *fleetsim.Driver) {
		d.Hosts["s1"].NeverJoin = true // rolled back past the join's bound
		d.Hosts["s1"].NoFinish = true  // its agent steps down but does not finish
	})
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultPending, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Contains(t, res.Reason, "s1 did not finish its demotion within 20s: its step-down and member-gone stay on its Node until its agent reports the finish")

	s1 := e.node("s1")
	var q api.Request
	require.NoError(t, json.Unmarshal([]byte(s1.Annotations[api.AnnotationRequest]), &q), "the step-down stays")
	assert.Equal(t, api.RequestStepDown, q.Action)
	assert.Equal(t, res.ID, q.Swap)
	assert.Equal(t, res.ID, s1.Annotations[api.AnnotationMemberGone], "the member-gone stays")
	assert.False(t, s1.Spec.Unschedulable, "the rollback uncordoned it")
	assert.Equal(t, api.RoleStandby, s1.Labels[api.LabelRole])
	for _, n := range []string{"v1", "v2", "v3"} {
		for _, a := range api.SwapAnnotations {
			assert.NotContains(t, e.node(n).Annotations, a, "%s on %s: the others are cleared", a, n)
		}
	}
	st, _ := e.status()
	assert.Equal(t, []string{"s1"}, st.Pending)
	assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: res.ID}}, st.Unfinished)
	require.Eventually(t, func() bool { return e.metric("fleet_role_unfinished_demotions") == "fleet_role_unfinished_demotions 1" },
		5*time.Second, 50*time.Millisecond, "the gauge counts s1: %q", e.metric("fleet_role_unfinished_demotions"))
	var events map[string]string
	require.Eventually(t, func() bool { events = e.nodeEvents("s1"); return events[api.EventDemotionUnfinished] != "" },
		10*time.Second, 100*time.Millisecond, "a warning on s1")
	assert.Contains(t, events[api.EventDemotionUnfinished], "Warning: swap "+res.ID+" ended before the agent of s1 reported the finish of its demotion")
	assert.Contains(t, events[api.EventDemotionUnfinished], "kubectl annotate node s1 fleet-role.io/request- fleet-role.io/member-gone- fleet-role.io/cordoned-by-")
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Regexp(t, `PENDING +s1: swap `+res.ID+` ended before its agent reported the finish of its demotion`, out)
	_, stderr, code = e.cli("swap", "v1", "s1")
	assert.NotEqual(t, 0, code, "s1 is no candidate meanwhile")
	assert.Contains(t, stderr, "s1 has not finished its demotion from swap "+res.ID+": its agent has not reported the finish")

	// Its agent back: it reports the finish on its Node, and the
	// controller clears what the swap left there.
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].NoFinish = false })
	require.Eventually(t, func() bool {
		a := e.node("s1").Annotations
		_, request := a[api.AnnotationRequest]
		_, gone := a[api.AnnotationMemberGone]
		return !request && !gone
	}, 30*time.Second, 100*time.Millisecond, "s1's annotations are cleared")
	rep := e.node("s1").Annotations[api.AnnotationReport]
	assert.Contains(t, rep, `"action":"finish"`)
	require.Eventually(t, func() bool { st, _ := e.status(); return len(st.Pending) == 0 && len(st.Unfinished) == 0 },
		10*time.Second, 100*time.Millisecond, "s1 drops out of status.pending")
	require.Eventually(t, func() bool { return e.metric("fleet_role_unfinished_demotions") == "fleet_role_unfinished_demotions 0" },
		5*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return e.nodeEvents("s1")[api.EventSwapReason(api.ActionClearFinished)] != "" },
		10*time.Second, 100*time.Millisecond, "an Event on s1 says it was cleared")
	assert.Equal(t, corev1.EventTypeNormal+": s1 finished its demotion from swap "+res.ID+": clearing the swap's annotations from its Node",
		e.nodeEvents("s1")[api.EventSwapReason(api.ActionClearFinished)])
}
