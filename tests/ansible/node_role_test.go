package ansible_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// roleFleet is a server, a standby and an agent, each the machine Ansible
// runs on in a prefix of its own, with the agent role's credentials made
// on the real API server.
type roleFleet struct {
	t      *testing.T
	prefix map[string]string
	args   []string
}

var roleFleetGroups = map[string]string{"runner-01": "fleet_servers", "runner-02": "fleet_standbys", "runner-03": "fleet_agents"}

func newRoleFleet(t *testing.T, kube *kubeapi.Server) *roleFleet {
	dir := t.TempDir()
	f := &roleFleet{t: t, prefix: map[string]string{}}
	var inv strings.Builder
	inv.WriteString("all:\n  children:\n")
	for i, h := range []string{"runner-01", "runner-02", "runner-03"} {
		f.prefix[h] = filepath.Join(dir, h)
		if roleFleetGroups[h] != "fleet_agents" {
			stageServer(t, f.prefix[h])
		}
		fmt.Fprintf(&inv, "    %s:\n      hosts:\n        %s: {ansible_connection: local, ansible_host: 10.0.0.%d, fleet_role_agent_prefix: %s}\n",
			roleFleetGroups[h], h, i+1, f.prefix[h])
	}
	invFile := filepath.Join(dir, "inventory.yml")
	require.NoError(t, os.WriteFile(invFile, []byte(inv.String()), 0o644))
	play := filepath.Join(dir, "agent.yml")
	require.NoError(t, os.WriteFile(play, []byte("- hosts: all\n  gather_facts: false\n  roles:\n    - role: fleet_role_agent\n"), 0o644))
	f.args = []string{"-i", invFile, play, "-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary=" + binary,
		"-e", "ansible_python_interpreter=/usr/bin/python3",
		"-e", "fleet_role_agent_admin_kubeconfig=" + kube.Kubeconfig, "-e", "fleet_role_agent_api_server=" + kube.URL}
	return f
}

func (f *roleFleet) run(extra ...string) (string, error) {
	f.t.Helper()
	return tool(f.t, "ansible-playbook", append(append([]string(nil), f.args...), extra...)...)
}

func roles(t *testing.T, kube *kubeapi.Server) map[string]string {
	t.Helper()
	nodes, err := kube.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels[api.LabelRole]
	}
	return out
}

func TestTheAgentRoleLabelsEachRegisteredNodeWithItsGroupsRoleOnlyWhereItHasNoneAndRequiresTheNode(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	f := newRoleFleet(t, kube)

	// No Node yet: k3s has not started on the hosts. Check mode says
	// each is labelled once registered; a run waits for the Nodes, then
	// names each host.
	out, err := f.run("--check")
	require.NoError(t, err, out)
	for _, h := range []string{"runner-01", "runner-02", "runner-03"} {
		assert.Contains(t, out, h+" has no Node "+h+" yet: it is labelled")
	}
	out, err = f.run("-e", "fleet_role_agent_node_wait=2")
	require.Error(t, err, out)
	for _, h := range []string{"runner-01", "runner-02", "runner-03"} {
		assert.Contains(t, out, h+" has no Node "+h+" on the cluster 2s after the agent's start: k3s's kubelet registers it")
	}
	assert.Empty(t, roles(t, kube))

	// Registered as a kubelet registers them; runner-03's role is the
	// cluster's already, as after a swap.
	for _, h := range []string{"runner-01", "runner-02", "runner-03"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h, Labels: map[string]string{"kubernetes.io/hostname": h}}}
		if h == "runner-03" {
			n.Labels[api.LabelRole] = api.RoleVoter
		}
		_, err := kube.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	out, err = f.run("--check")
	require.NoError(t, err, out)
	assert.Equal(t, map[string]string{"runner-01": "", "runner-02": "", "runner-03": api.RoleVoter}, roles(t, kube), "check mode labels nothing")

	out, err = f.run()
	require.NoError(t, err, out)
	assert.Equal(t, map[string]string{"runner-01": api.RoleVoter, "runner-02": api.RoleStandby, "runner-03": api.RoleVoter}, roles(t, kube),
		"each unlabelled Node labelled with its group's role, the labelled one left alone")
	assert.Contains(t, out, "runner-03's role on the cluster is voter, its inventory group's agent: the cluster's is kept")
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, "runner-01", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "runner-01", n.Labels["kubernetes.io/hostname"], "the kubelet's labels are kept")

	// A swap made runner-01 a standby: a later run keeps that.
	_, err = kube.Client.CoreV1().Nodes().Patch(ctx, "runner-01", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"`+api.LabelRole+`":"`+api.RoleStandby+`"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	out, err = f.run()
	require.NoError(t, err, out)
	assert.Zero(t, changed(t, out), "a later run changes nothing")
	assert.Equal(t, api.RoleStandby, roles(t, kube)["runner-01"], "a swap's role is kept")

	// Not asked to label (credentials made elsewhere): no Node needed.
	require.NoError(t, kube.Client.CoreV1().Nodes().Delete(ctx, "runner-02", metav1.DeleteOptions{}))
	out, err = f.run("--limit", "runner-02", "-e", "fleet_role_agent_label_node=false")
	require.NoError(t, err, out)
}

func TestTheAgentRoleRefusesFleetRolesRoleLabelAmongK3sSettings(t *testing.T) {
	kube := kubeapi.Start(t)
	f := newRoleFleet(t, kube)
	for _, h := range []string{"runner-01", "runner-02", "runner-03"} {
		_, err := kube.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	write := func(host, p, content string) string {
		t.Helper()
		full := filepath.Join(f.prefix[host], p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
		return full
	}
	for _, tt := range []struct {
		name, host, path, content string
	}{
		{"config.yaml", "runner-01", "/etc/rancher/k3s/config.yaml", "node-label:\n  - fleet-role.io/role=voter\n"},
		{"a drop-in", "runner-02", "/etc/rancher/k3s/config.yaml.d/10-labels.yaml", "node-label+:\n  - fleet-role.io/role=standby\n"},
		{"the agent's unit", "runner-03", "/etc/systemd/system/k3s-agent.service", "[Service]\nExecStart=/usr/local/bin/k3s agent --node-label=fleet-role.io/role=agent\n"},
		{"the unit's environment", "runner-03", "/etc/systemd/system/k3s-agent.service.env", "K3S_NODE_LABEL=fleet-role.io/role=agent\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			full := write(tt.host, tt.path, tt.content)
			defer os.Remove(full)
			out, err := f.run("--limit", tt.host)
			require.Error(t, err, out)
			assert.Contains(t, out, "fleet-role.io/role is among k3s's settings on "+tt.host+" ("+full+")")
			assert.Contains(t, out, "k3s puts its node-labels back on every start")
			assert.Empty(t, roles(t, kube)[tt.host], "the Node is not labelled")
		})
	}
	t.Run("a Docker host's k3s arguments", func(t *testing.T) {
		out, err := f.run("--limit", "runner-01", "-e", `{"fleet_role_agent_docker_server_args": ["--node-label=fleet-role.io/role=voter"]}`)
		require.Error(t, err, out)
		assert.Contains(t, out, "fleet-role.io/role is among k3s's settings on runner-01 (--node-label=fleet-role.io/role=voter)")
	})
	t.Run("other labels pass", func(t *testing.T) {
		write("runner-01", "/etc/rancher/k3s/config.yaml", "node-label:\n  - example.com/team=ci\n")
		out, err := f.run("--limit", "runner-01")
		require.NoError(t, err, out)
		assert.Equal(t, api.RoleVoter, roles(t, kube)["runner-01"])
	})
}

// stageServer stages a host in a prefix to become a k3s server, as k3s's
// installer (with INSTALL_K3S_SKIP_ENABLE on a standby) and the operator
// leave it: k3s's configuration, unless one is there, and k3s.service.
func stageServer(t *testing.T, prefix string) {
	t.Helper()
	for p, content := range map[string]string{
		"/etc/rancher/k3s/config.yaml":    "token-file: /etc/rancher/k3s/token\n",
		"/etc/systemd/system/k3s.service": "[Unit]\nDescription=Lightweight Kubernetes\n\n[Service]\nType=notify\nExecStart=/usr/local/bin/k3s server\n",
	} {
		full := filepath.Join(prefix, p)
		if _, err := os.Stat(full); err == nil {
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

func TestTheAgentRoleRefusesAServerOrStandbyNotStagedNamingWhatIsMissing(t *testing.T) {
	kube := kubeapi.Start(t)
	f := newRoleFleet(t, kube)
	require.NoError(t, os.Remove(filepath.Join(f.prefix["runner-02"], "/etc/rancher/k3s/config.yaml")))
	require.NoError(t, os.Remove(filepath.Join(f.prefix["runner-02"], "/etc/systemd/system/k3s.service")))
	require.NoError(t, os.Remove(filepath.Join(f.prefix["runner-01"], "/etc/systemd/system/k3s.service")))

	out, err := f.run("--limit", "runner-01,runner-02,runner-03", "-e", "fleet_role_agent_node_wait=2")
	require.Error(t, err, out)
	assert.Contains(t, out, "runner-02 is not staged to become a k3s server: the staged file /etc/rancher/k3s/config.yaml, k3s's server unit k3s.service missing")
	assert.Contains(t, out, "runner-01 is not staged to become a k3s server: k3s's server unit k3s.service missing")
	assert.NotContains(t, out, "runner-03 is not staged", "an agent is never a server")
	assert.NoFileExists(t, filepath.Join(f.prefix["runner-02"], "/etc/fleet-role/agent.toml"), "refused before anything changes on the host")
	assert.NoFileExists(t, filepath.Join(f.prefix["runner-02"], "/usr/bin/fleet-role"))
}
