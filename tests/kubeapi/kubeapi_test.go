package kubeapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

func TestTheHarnessServesNodes(t *testing.T) {
	s := kubeapi.Start(t)
	ctx := context.Background()
	_, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	n, err := s.Client.CoreV1().Nodes().Get(ctx, "h1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "h1", n.Name)
}
