package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
)

// kured's lock on a real API server, and what kured would make of it, are
// tests/controller's part; here, each case of what the marks write.

func testMarks(t *testing.T, lock string, concurrency int, now *time.Time) (*marks, *k8sfake.Clientset) {
	t.Helper()
	client := k8sfake.NewClientset(kuredDaemonSet(lock))
	h := config.DefaultController().Holds
	h.KuredDaemonSet, h.KuredConcurrency = "kube-system/kured", concurrency
	m := newMarks(client, newCache(client, "fleet-role", nil, nil, func() {}), h, func() time.Time { return *now })
	return m, client
}

func lockOn(t *testing.T, client *k8sfake.Clientset) (string, bool) {
	t.Helper()
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kured", metav1.GetOptions{})
	require.NoError(t, err)
	v, ok := ds.Annotations[config.DefaultKuredLockAnnotation]
	return v, ok
}

func TestTheControllersPlaceInKuredsLockIsTakenRenewedPastHalfItsTTLAndReleased(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	m, client := testMarks(t, "", 1, &now)
	require.Empty(t, m.claim(ctx))
	v, ok := lockOn(t, client)
	require.True(t, ok)
	assert.JSONEq(t, `{"nodeID":"fleet-role-controller","metadata":{"unschedulable":false},"created":"2026-12-06T10:00:00Z","TTL":1800000000000}`, v)
	mine, err := kuredHolds(t, kuredDaemonSet(v)).kured(ctx, now, "kube-system", "kured")
	require.NoError(t, err)
	assert.Empty(t, mine, "the controller's own place does not hold its own start")

	// Within the check interval nothing is read or written; past half the
	// TTL (capped at a minute here) the place is written anew.
	now = now.Add(30 * time.Second)
	require.NoError(t, m.keepLock(ctx, true))
	v2, _ := lockOn(t, client)
	assert.Equal(t, v, v2)
	now = now.Add(31 * time.Second)
	require.NoError(t, m.keepLock(ctx, true))
	v3, _ := lockOn(t, client)
	assert.Contains(t, v3, `"created":"2026-12-06T10:01:01Z"`)

	require.NoError(t, m.keepLock(ctx, false))
	_, ok = lockOn(t, client)
	assert.False(t, ok, "released, as kured's single Release: the annotation removed")
	assert.False(t, m.lockMaybeOurs)
}

func TestAnotherHolderOfKuredsLockKeepsItFromTheControllerUntilItsTTLRunsOut(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	theirs := `{"nodeID":"v3","metadata":{"unschedulable":true},"created":"2026-12-06T09:59:00Z","TTL":120000000000}`
	m, client := testMarks(t, theirs, 1, &now)
	assert.Equal(t, "kured's reboot lock is held by v3", m.claim(ctx))
	require.NoError(t, m.keepLock(ctx, true), "a swap started past the lock (--override holds) waits for it")
	v, _ := lockOn(t, client)
	assert.Equal(t, theirs, v)
	require.NoError(t, m.keepLock(ctx, false))
	v, _ = lockOn(t, client)
	assert.Equal(t, theirs, v, "a release takes nothing of another's")

	now = now.Add(time.Minute) // its TTL runs out
	require.Empty(t, m.claim(ctx))
	v, _ = lockOn(t, client)
	assert.Contains(t, v, `"nodeID":"fleet-role-controller"`)
}

func TestInKuredsMultipleLockTheControllerTakesEveryPlaceAndGivesBackOnlyItsOwn(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	expired := `{"nodeID":"v2","created":"2026-12-06T09:00:00Z","TTL":60000000000}`
	m, client := testMarks(t, `{"maxOwners":2,"locks":[`+expired+`]}`, 1, &now)
	require.Empty(t, m.claim(ctx), "a place run out is free, as kured's canAcquireMultiple")
	v, _ := lockOn(t, client)
	var multi kuredMultiLock
	require.NoError(t, json.Unmarshal([]byte(v), &multi))
	require.NotNil(t, multi.MaxOwners)
	assert.Equal(t, 2, *multi.MaxOwners)
	require.Len(t, multi.Locks, 2)
	for _, l := range multi.Locks {
		assert.Equal(t, api.ControllerHolder, l.NodeID)
	}

	// Someone adds a place by hand; the release keeps it.
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
	require.NoError(t, err)
	multi.Locks = append(multi.Locks, kuredLock{NodeID: "a1", Created: now})
	b, _ := json.Marshal(multi)
	ds.Annotations[config.DefaultKuredLockAnnotation] = string(b)
	_, err = client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, m.keepLock(ctx, false))
	v, _ = lockOn(t, client)
	assert.JSONEq(t, `{"maxOwners":2,"locks":[{"nodeID":"a1","created":"2026-12-06T10:00:00Z","TTL":0}]}`, v)
}

func TestKuredConcurrencyAboveOneWritesTheMultipleFormWhereNoLockWasYet(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	m, client := testMarks(t, "", 3, &now)
	require.Empty(t, m.claim(context.Background()))
	v, _ := lockOn(t, client)
	var multi kuredMultiLock
	require.NoError(t, json.Unmarshal([]byte(v), &multi))
	require.NotNil(t, multi.MaxOwners)
	assert.Equal(t, 3, *multi.MaxOwners)
	assert.Len(t, multi.Locks, 3)
}

func TestTheSwapsTwoNodesAreLabelledOutAndInEveryOtherVoterVoterAndEveryOtherLabelIsTakenOffAndAllAtTheEnd(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	m, client := testMarks(t, "", 1, &now)
	m.holds.KuredDaemonSet = config.HoldOff // the labels alone
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "v1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s1", Labels: map[string]string{api.LabelSwapping: api.LabelSwappingOut}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "v3", Labels: map[string]string{api.LabelSwapping: api.LabelSwappingIn, "zone": "a"}}},
	} {
		out, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		m.cache.wrote(out)
	}
	// A Node the cache holds labelled, gone from the API server.
	m.cache.wrote(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone", Labels: map[string]string{api.LabelSwapping: api.LabelSwappingIn}}})
	labels := func() map[string]string {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		out := map[string]string{}
		for _, n := range list.Items {
			if v, ok := n.Labels[api.LabelSwapping]; ok {
				out[n.Name] = v
			}
		}
		return out
	}

	require.NoError(t, m.keep(ctx, &api.SwapRecord{Out: "v1", In: "s1"}, []string{"v1"}))
	assert.Equal(t, map[string]string{"v1": "out", "s1": "in"}, labels())
	assert.Equal(t, map[string]string{"v1": "out", "s1": "in"}, m.cache.swappingLabels(), "the cache keeps what was written; the Node gone is forgotten")
	v3, err := client.CoreV1().Nodes().Get(ctx, "v3", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"zone": "a"}, v3.Labels, "only the label of the swap is taken off")

	require.NoError(t, m.keep(ctx, &api.SwapRecord{Out: "v1", In: "s1"}, []string{"s1", "v1", "v3"}))
	assert.Equal(t, map[string]string{"v1": "out", "s1": "in", "v3": "voter"}, labels(),
		"every other voter is labelled too, so that an upgrade Plan keeps off it while the swap runs")

	require.NoError(t, m.keep(ctx, nil, []string{"s1", "v1", "v3"}))
	assert.Empty(t, labels())
	assert.Empty(t, m.cache.swappingLabels())
}

func TestWithNoDaemonSetConfiguredKuredsLockIsTakenOnTheOneFoundAndReleasedAndNoneIsWrittenWhereNoneIsFound(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	client := k8sfake.NewClientset(kuredDaemonSet(""))
	m := newMarks(client, newCache(client, "fleet-role", nil, nil, func() {}), config.DefaultController().Holds, clock)
	require.Empty(t, m.claim(ctx))
	v, ok := lockOn(t, client)
	require.True(t, ok, "taken on kube-system/kured, found by its name")
	assert.Contains(t, v, `"nodeID":"fleet-role-controller"`)
	require.NoError(t, m.keep(ctx, nil, nil))
	_, ok = lockOn(t, client)
	assert.False(t, ok, "released once no swap runs")

	empty := k8sfake.NewClientset()
	m = newMarks(empty, newCache(empty, "fleet-role", nil, nil, func() {}), config.DefaultController().Holds, clock)
	assert.Empty(t, m.claim(ctx), "no kured: nothing holds the start")
	require.NoError(t, m.keep(ctx, &api.SwapRecord{Out: "v1", In: "s1"}, nil))
	list, err := empty.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, list.Items)
}
