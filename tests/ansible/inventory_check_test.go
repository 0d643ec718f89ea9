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

// checkedHost is a host of an inventory checked against the cluster: its
// group, and its Node's labels (nil: no Node).
type checkedHost struct {
	name, group string
	labels      map[string]string
}

// checkedFleet writes an inventory of hosts, each the machine Ansible
// runs on in a prefix of its own (staged where it may become a server),
// and registers their Nodes on the real API server.
func checkedFleet(t *testing.T, kube *kubeapi.Server, hosts []checkedHost) (inv string, prefix map[string]string) {
	t.Helper()
	dir := t.TempDir()
	prefix = map[string]string{}
	groups := map[string][]string{}
	for i, h := range hosts {
		prefix[h.name] = filepath.Join(dir, h.name)
		if h.group != "fleet_agents" {
			stageServer(t, prefix[h.name])
		}
		groups[h.group] = append(groups[h.group], fmt.Sprintf("        %s: {ansible_connection: local, ansible_host: 10.0.0.%d, fleet_role_agent_prefix: %s}\n",
			h.name, i+1, prefix[h.name]))
		if h.labels != nil {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.name, Labels: h.labels}}
			_, err := kube.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	var b strings.Builder
	b.WriteString("all:\n  children:\n")
	for _, g := range []string{"fleet_servers", "fleet_standbys", "fleet_agents"} {
		if len(groups[g]) > 0 {
			fmt.Fprintf(&b, "    %s:\n      hosts:\n%s", g, strings.Join(groups[g], ""))
		}
	}
	inv = filepath.Join(dir, "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte(b.String()), 0o644))
	return inv, prefix
}

func TestDeployRefusesAVoterOrStandbyListedAmongFleetAgentsNamingEachBeforeChangingAnyHost(t *testing.T) {
	kube := kubeapi.Start(t)
	inv, prefix := checkedFleet(t, kube, []checkedHost{
		// k3s's etcd server, not yet labelled by fleet-role, where a server is.
		{name: "runner-01", group: "fleet_servers", labels: map[string]string{api.LabelEtcd: "true"}},
		// A voter a swap made of a standby: the pool is one, kept.
		{name: "runner-02", group: "fleet_standbys", labels: map[string]string{api.LabelRole: api.RoleVoter}},
		// A voter, and k3s's etcd server, listed among the agents.
		{name: "runner-03", group: "fleet_agents", labels: map[string]string{api.LabelRole: api.RoleVoter}},
		{name: "runner-04", group: "fleet_agents", labels: map[string]string{api.LabelEtcd: "true"}},
		// A standby listed among the agents.
		{name: "runner-05", group: "fleet_agents", labels: map[string]string{api.LabelRole: api.RoleStandby}},
		// An agent, and a host whose k3s has not registered its Node.
		{name: "runner-06", group: "fleet_agents", labels: map[string]string{api.LabelRole: api.RoleAgent}},
		{name: "runner-07", group: "fleet_agents"},
	})
	out, err := tool(t, "ansible-playbook", "-i", inv, "deploy.yml", "-e", "ansible_python_interpreter=/usr/bin/python3",
		"-e", "fleet_role_agent_binary="+binary, "-e", "fleet_role_agent_admin_kubeconfig="+kube.Kubeconfig,
		"-e", "fleet_role_controller_kubeconfig="+kube.Kubeconfig, "-e", "fleet_role_controller_binary="+binary,
		"-e", "fleet_role_controller_helm="+helmBinary, "-e", "fleet_role_controller_wait=false", "-e", "fleet_role_agent_manage_service=false")
	require.Error(t, err, out)
	assert.Contains(t, out, "Not deploying: the inventory lists among fleet_agents runner-03 (Node runner-03: a voter on the cluster), "+
		"runner-04 (Node runner-04: an etcd server on the cluster), runner-05 (Node runner-05: a standby on the cluster).")
	for _, h := range []string{"runner-01", "runner-02", "runner-06", "runner-07"} {
		assert.NotContains(t, out, h+" (Node", "%s is not named: its group agrees with the cluster, or the cluster knows no role of it", h)
	}
	for h, p := range prefix {
		_, err := os.Stat(filepath.Join(p, "etc/fleet-role"))
		assert.True(t, os.IsNotExist(err), "%s: nothing is installed on any host: %v", h, err)
	}
	_, err = kube.Client.CoreV1().Namespaces().Get(context.Background(), api.Namespace, metav1.GetOptions{})
	assert.Error(t, err, "nothing is applied to the cluster")
	for h, role := range roles(t, kube) {
		want := map[string]string{"runner-02": api.RoleVoter, "runner-03": api.RoleVoter, "runner-05": api.RoleStandby, "runner-06": api.RoleAgent}[h]
		assert.Equal(t, want, role, "%s: no Node is labelled", h)
	}
}

func TestTheFirstRoleFileIsTheClustersRoleOfTheHostAndTheInventoryGroupsOnlyWhereTheClusterKnowsNone(t *testing.T) {
	kube := kubeapi.Start(t)
	inv, prefix := checkedFleet(t, kube, []checkedHost{
		{name: "runner-01", group: "fleet_servers", labels: map[string]string{api.LabelEtcd: "true"}},
		{name: "runner-02", group: "fleet_standbys", labels: map[string]string{api.LabelRole: api.RoleVoter}},
		{name: "runner-03", group: "fleet_servers", labels: map[string]string{api.LabelRole: api.RoleStandby}},
		{name: "runner-04", group: "fleet_servers"},
		{name: "runner-05", group: "fleet_standbys"},
		{name: "runner-06", group: "fleet_agents", labels: map[string]string{}},
	})
	// deploy.yml's check, then the agent role, as deploy.yml runs them.
	play := filepath.Join(filepath.Dir(inv), "check-and-agent.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: fleet_role_controller
        tasks_from: inventory_check.yml
- hosts: all
  gather_facts: false
  roles:
    - role: fleet_role_agent
`), 0o644))
	out, err := tool(t, "ansible-playbook", "-i", inv, play, "-e", "ansible_python_interpreter=/usr/bin/python3",
		"-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary="+binary,
		"-e", "fleet_role_agent_admin_kubeconfig="+kube.Kubeconfig, "-e", "fleet_role_agent_api_server="+kube.URL,
		"-e", "fleet_role_controller_kubeconfig="+kube.Kubeconfig, "-e", "fleet_role_agent_label_node=false")
	require.NoError(t, err, out)
	got := map[string]string{}
	for h, p := range prefix {
		b, err := os.ReadFile(filepath.Join(p, "var/lib/fleet-role/role"))
		require.NoError(t, err, h)
		got[h] = strings.TrimSpace(string(b))
	}
	assert.Equal(t, map[string]string{
		"runner-01": "server", // not labelled by fleet-role: its group's
		"runner-02": "server", // a voter on the cluster, in fleet_standbys
		"runner-03": "agent",  // a standby on the cluster, in fleet_servers
		"runner-04": "server", // no Node: its group's
		"runner-05": "agent",
		"runner-06": "agent",
	}, got)
}
