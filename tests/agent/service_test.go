package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// TestTheAgentRunsAsItsHardenedSystemdServiceAndPromotesANativeStandby
// installs the packaged unit on a host with systemd as PID 1, starts it
// (Type=notify: active once the agent says READY), and has it promote the
// host through systemd's D-Bus API and report to the real API server.
func TestTheAgentRunsAsItsHardenedSystemdServiceAndPromotesANativeStandby(t *testing.T) {
	kube := kubeapi.Start(t)
	h := testhost.StartSystemdHost(t, "--network", "host")
	ctx := context.Background()
	node := "native-1"
	_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	require.NoError(t, err)
	grantNode(t, kube, node)

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	agentKubeconfig(t, kube, node, kubeconfig)
	kc, err := os.ReadFile(kubeconfig)
	require.NoError(t, err)
	cfg := strings.ReplaceAll(string(config.DefaultAgentTOML()), `node_name = "runner-01"`, fmt.Sprintf("node_name = %q", node))
	cfg = strings.ReplaceAll(cfg, `agent_env_file = "/etc/systemd/system/k3s-agent.service.env"`, `agent_env_file = "/run/fleet-role-test/k3s-agent.env"`)
	cfg = strings.ReplaceAll(cfg, `endpoint = "https://127.0.0.1:2379"`, `endpoint = "http://127.0.0.1:1"`)
	files := map[string]string{
		"/etc/fleet-role/agent.toml":   cfg,
		"/etc/fleet-role/kubeconfig":   strings.ReplaceAll(string(kc), kube.CAFile, "/etc/fleet-role/ca.crt"),
		"/etc/fleet-role/ca.crt":       mustRead(t, kube.CAFile),
		"/etc/rancher/k3s/config.yaml": "cluster-init: false\n",
	}
	for path, content := range files {
		local := filepath.Join(dir, filepath.Base(path))
		require.NoError(t, os.WriteFile(local, []byte(content), 0o600))
		h.Exec(t, "mkdir", "-p", filepath.Dir(path))
		testhost.Docker(t, "cp", local, h.Name+":"+path)
	}
	testhost.Docker(t, "cp", binary, h.Name+":/usr/bin/fleet-role")
	testhost.Docker(t, "cp", filepath.Join(testhost.Root(), "packaging", "fleet-role-agent.service"), h.Name+":/etc/systemd/system/fleet-role-agent.service")
	// The drop-in directory exists, as the agent's Ansible role makes it:
	// the hardened unit may write there and nowhere else under /etc/rancher.
	h.Exec(t, "sh", "-c", "mkdir -p /var/lib/fleet-role /etc/rancher/k3s/config.yaml.d && echo agent > /var/lib/fleet-role/role && systemctl start k3s-agent.service")

	verify := h.Exec(t, "sh", "-c", "systemd-analyze verify /etc/systemd/system/fleet-role-agent.service 2>&1 || true")
	assert.NotContains(t, verify, "fleet-role-agent.service:", "systemd-analyze finds fault with the unit: %s", verify)

	h.Exec(t, "systemctl", "daemon-reload")
	h.Exec(t, "systemctl", "enable", "--now", "fleet-role-agent.service")
	assert.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "fleet-role-agent.service"), "Type=notify: active after READY=1")

	q, _ := json.Marshal(api.Request{Swap: "s1", Action: api.RequestPromote, At: time.Now().UTC().Truncate(time.Second),
		Voters: []string{"runner-02", "runner-03"}})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationRequest: string(q)}}})
	_, err = kube.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	var r *api.Report
	require.Eventually(t, func() bool {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || n.Annotations[api.AnnotationReport] == "" {
			return false
		}
		r = &api.Report{}
		return json.Unmarshal([]byte(n.Annotations[api.AnnotationReport]), r) == nil
	}, 60*time.Second, 200*time.Millisecond, "journal:\n%s", h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager", "-n", "50"))
	assert.Equal(t, api.StateDone, r.State, r.Message)
	// The report carries the unit's start, not its READY=1 (k3s says it
	// once its member votes; the stand-in as soon as it runs): the unit
	// may still be activating when the report is read. An outer limit: the
	// stand-in is ready within a second on an idle machine.
	assert.Eventually(t, func() bool {
		out, _ := exec.Command("docker", "exec", h.Name, "systemctl", "is-active", "k3s.service").Output()
		return strings.TrimSpace(string(out)) == "active"
	}, 30*time.Second, 200*time.Millisecond, "k3s.service active")
	assert.Equal(t, "inactive", h.Exec(t, "sh", "-c", "systemctl is-active k3s-agent.service || true"))
	enter := h.Exec(t, "systemctl", "show", "-p", "ExecMainStartTimestamp", "--timestamp=unix", "--value", "k3s.service")
	sec, err := strconv.ParseInt(strings.TrimPrefix(enter, "@"), 10, 64)
	require.NoError(t, err)
	require.NotNil(t, r.StartedAt)
	assert.Equal(t, sec, r.StartedAt.Unix(), "the report carries the server unit's start")
	assert.Equal(t, "server", h.Exec(t, "cat", "/var/lib/fleet-role/role"))
	assert.Contains(t, h.Exec(t, "cat", "/etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml"), "server: https://10.0.0.2:6443",
		"the hardened unit wrote the server's join through a live voter")

	h.Exec(t, "systemctl", "stop", "fleet-role-agent.service")
	assert.Contains(t, h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager"), "stopping")
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
