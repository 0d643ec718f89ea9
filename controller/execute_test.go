package controller

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleet-role/fleet-role/api"
)

func TestTheCleanUpPatch(t *testing.T) {
	ours := corev1.Taint{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule}
	foreign := corev1.Taint{Key: "example.com/dedicated", Value: "ci", Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name   string
		role   string
		taints []corev1.Taint
		spec   string // the patch's spec, "" for none
		rv     bool
	}{
		{"a standby without our taint leaves the taints alone and sets no precondition", api.RoleStandby, []corev1.Taint{foreign}, "", false},
		{"a standby with our taint and a foreign one keeps the foreign one, on condition of the version read", api.RoleStandby,
			[]corev1.Taint{foreign, ours}, `{"taints":[{"key":"example.com/dedicated","value":"ci","effect":"NoExecute"}]}`, true},
		{"a standby with our taint alone has its list removed, on condition of the version read", api.RoleStandby,
			[]corev1.Taint{ours}, `{"taints":null}`, true},
		{"a voter's clean-up sets its role and nothing else", api.RoleVoter, []corev1.Taint{ours}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(cleanUp(tc.role, nodeTaints{resourceVersion: "42", taints: tc.taints}))
			require.NoError(t, err)
			var patch struct {
				Metadata struct {
					ResourceVersion string         `json:"resourceVersion"`
					Labels          map[string]any `json:"labels"`
				} `json:"metadata"`
				Spec json.RawMessage `json:"spec"`
			}
			require.NoError(t, json.Unmarshal(b, &patch))
			assert.Equal(t, tc.role, patch.Metadata.Labels[api.LabelRole])
			if tc.spec == "" {
				assert.Empty(t, patch.Spec, string(b))
			} else {
				assert.JSONEq(t, tc.spec, string(patch.Spec))
			}
			if tc.rv {
				assert.Equal(t, "42", patch.Metadata.ResourceVersion)
			} else {
				assert.Empty(t, patch.Metadata.ResourceVersion)
			}
		})
	}
}
