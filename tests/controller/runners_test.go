package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/fleet-role/fleet-role/api"
)

var runnerGVR = schema.GroupVersionResource{Group: "actions.github.com", Version: "v1alpha1", Resource: "ephemeralrunners"}

// runnerCRD is the actions-runner-controller's EphemeralRunner as its CRD
// serves it (ARC's apis/actions.github.com/v1alpha1/ephemeralrunner_types.go):
// namespaced, status a subresource. The schema keeps the status fields
// the controller reads.
var runnerCRD = namespacedCRD("actions.github.com", "v1alpha1", "EphemeralRunner", "ephemeralrunners", map[string]any{
	"phase":             map[string]any{"type": "string"},
	"jobId":             map[string]any{"type": "string"},
	"jobRepositoryName": map[string]any{"type": "string"},
	"jobDisplayName":    map[string]any{"type": "string"},
	"workflowRunId":     map[string]any{"type": "integer"},
})

// A swap waiting on a runner pod of the outgoing voter names the GitHub
// job it runs, read from the pod's EphemeralRunner, in its status and in
// fleet-role status, and goes on once the pod has finished.
func TestASwapWaitingOnARunnerPodNamesTheJobItsEphemeralRunnerRunsAndGoesOnOnceItFinishes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3, 1, 0)
	dyn, err := dynamic.NewForConfig(e.rest)
	require.NoError(t, err)
	_, err = dyn.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: runnerCRD}, metav1.CreateOptions{})
	require.NoError(t, err)
	runners := dyn.Resource(runnerGVR).Namespace("arc-runners")
	var runner *unstructured.Unstructured
	// Note: a CRD is served within seconds of its creation.
	require.Eventually(t, func() bool {
		runner, err = runners.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "actions.github.com/v1alpha1", "kind": "EphemeralRunner",
			"metadata": map[string]any{"name": "runner-7kq2p"},
			"spec":     map[string]any{"githubConfigUrl": "https://github.com/octo-org"},
		}}, metav1.CreateOptions{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the CRD is served: %v", err)
	runner.Object["status"] = map[string]any{"phase": "Running", "jobId": "7", "jobRepositoryName": "octo-org/app",
		"jobDisplayName": "build (ubuntu)", "workflowRunId": int64(4242)}
	_, err = runners.UpdateStatus(ctx, runner, metav1.UpdateOptions{})
	require.NoError(t, err)
	ctrl := true
	pod, err := e.api.Client.CoreV1().Pods("arc-runners").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-7kq2p", Labels: map[string]string{"app.kubernetes.io/component": "runner"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "actions.github.com/v1alpha1", Kind: "EphemeralRunner",
				Name: "runner-7kq2p", UID: runner.GetUID(), Controller: &ctrl}}},
		Spec: corev1.PodSpec{NodeName: "v1", Containers: []corev1.Container{{Name: "runner", Image: "runner"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	const job = "octo-org/app: build (ubuntu) (run 4242)"
	var st api.Status
	// Note: the candidate's steps take about 20 s at the test bounds; 2
	// minutes are the outer limit.
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Step == api.StepRunnersOut && st.Jobs["arc-runners/runner-7kq2p"] == job
	}, 2*time.Minute, 100*time.Millisecond, "step %s: %s; jobs %v", st.Step, st.Reason, st.Jobs)
	assert.Equal(t, []string{"arc-runners/runner-7kq2p"}, st.WaitingOn)
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "1 runner pod(s), each running a job: arc-runners/runner-7kq2p ("+job+")")
	t.Logf("fleet-role status:\n%s", out)

	pod.Status.Phase = corev1.PodSucceeded
	_, err = e.api.Client.CoreV1().Pods("arc-runners").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Note: the outgoing voter's steps after its runners take about 20 s.
	res := e.waitEnd(2 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	st, _ = e.status()
	assert.Empty(t, st.Jobs)
}
