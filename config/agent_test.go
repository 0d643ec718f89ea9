package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheDefaultAgentConfigurationIsAccepted(t *testing.T) {
	a, err := ParseAgent(DefaultAgentTOML())
	require.NoError(t, err)
	want := DefaultAgent()
	want.NodeName = "runner-01"
	want.Servers = []Server{{"runner-01", "10.0.0.1"}, {"runner-02", "10.0.0.2"}, {"runner-03", "10.0.0.3"}}
	assert.Equal(t, want, a)
	assert.Equal(t, "agent", Kind(DefaultAgentTOML()))
	assert.Equal(t, "controller", Kind(DefaultControllerTOML()))
}

const minimalAgent = `version = 1
node_name = "h1"
[[servers]]
name = "h1"
address = "10.0.0.1"
`

func TestAMinimalAgentConfigurationTakesTheDefaults(t *testing.T) {
	a, err := ParseAgent([]byte(minimalAgent))
	require.NoError(t, err)
	assert.Equal(t, "h1", a.NodeName)
	assert.Equal(t, PlatformSystemd, a.Platform)
	assert.Equal(t, 30*time.Second, a.ResyncPeriod)
	assert.Equal(t, 5, a.KeepSnapshots)
	assert.Empty(t, a.SnapshotCopyDir, "no copy unless a directory is given")
	assert.Equal(t, "/var/lib/fleet-role/token", a.TokenFile, "where the Ansible role writes the agent's token")
	a, err = ParseAgent([]byte("token_file = \"\"\n" + minimalAgent))
	require.NoError(t, err)
	assert.Empty(t, a.TokenFile, "no token to renew: the kubeconfig holds its own credentials")
}

func TestK3sConfigFileIsTheOneWhoseDropInDirectoryHoldsTheJoinFile(t *testing.T) {
	a := DefaultAgent()
	assert.Equal(t, "/etc/rancher/k3s/config.yaml", a.K3sConfigFile())
	a.JoinFile = "/srv/k3s/k3s.yaml.d/90-fleet-role.yaml"
	assert.Equal(t, "/srv/k3s/k3s.yaml", a.K3sConfigFile())
}

func TestADockerServersOtherFlagsAreAccepted(t *testing.T) {
	_, err := ParseAgent([]byte("platform = \"docker\"\n" + minimalAgent +
		"[docker]\nimage = \"i\"\nserver_args = [\"server\", \"--token-file=/t\", \"--node-label\", \"a=b\", \"--data-dir=/d\"]\n"))
	require.NoError(t, err)
}

func TestADockerAgentNeedsItsImage(t *testing.T) {
	_, err := ParseAgent([]byte(minimalAgent + "platform = \"docker\"\n"))
	require.Error(t, err, "platform after a table is a key of the table")
	_, err = ParseAgent([]byte("platform = \"docker\"\n" + minimalAgent))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "docker.image: is required")
	a, err := ParseAgent([]byte("platform = \"docker\"\n" + minimalAgent + "[docker]\nimage = \"rancher/k3s:v1.31\"\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"/var/lib/rancher/k3s:/var/lib/rancher/k3s"}, a.Docker.Volumes)
}

func TestBadAgentConfigurations(t *testing.T) {
	for _, tc := range []struct {
		name string
		toml string
		want []string
	}{
		{"an unknown key is named with its line", minimalAgent + "[systemd]\nserver_unti = \"k3s.service\"\n", []string{`line 7: unknown key "systemd.server_unti"`}},
		{"an unknown key in an array of tables is named", "version = 1\nnode_name = \"h\"\n[[servers]]\nname = \"h\"\naddr = \"x\"\n", []string{`unknown key "servers.addr"`}},
		{"every problem at once", "version = 1\nplatform = \"podman\"\ndata_dir = \"relative\"\n", []string{
			"node_name: is required", "data_dir: must be an absolute path", "servers: at least one server", `platform: must be "systemd" or "docker", got "podman"`,
		}},
		{"a server listed twice", "version = 1\nnode_name = \"h\"\n[[servers]]\nname = \"a\"\naddress = \"1.2.3.4\"\n[[servers]]\nname = \"a\"\naddress = \"1.2.3.5\"\n",
			[]string{`servers[1].name: "a" is listed twice`}},
		{"a bad unit name", minimalAgent + "[systemd]\nagent_unit = \"k3s agent\"\n", []string{"systemd.agent_unit:"}},
		{"K3S_URL is the agent's to set", "platform = \"docker\"\n" + minimalAgent + "[docker]\nimage = \"i\"\nenv = [\"K3S_URL=https://x:6443\"]\n",
			[]string{"docker.env[0]: K3S_URL is set by the agent"}},
		{"the token is never in a container's environment", "platform = \"docker\"\n" + minimalAgent + "[docker]\nimage = \"i\"\nenv = [\"K3S_TOKEN=secret\"]\n",
			[]string{"docker.env[0]: K3S_TOKEN would show in `docker inspect`"}},
		{"the join file is outside k3s's drop-in directory, where k3s would never read it", "join_file = \"/etc/rancher/k3s/fleet-role.yaml\"\n" + minimalAgent,
			[]string{`join_file: "/etc/rancher/k3s/fleet-role.yaml" is not a .yaml file in the drop-in directory`}},
		{"the join file is no .yaml file, which k3s would never read", "join_file = \"/etc/rancher/k3s/config.yaml.d/90-fleet-role.conf\"\n" + minimalAgent,
			[]string{`join_file: "/etc/rancher/k3s/config.yaml.d/90-fleet-role.conf" is not a .yaml file`}},
		{"k3s's config file is not moved by the server container's command line, where the settings the agent reads may be",
			"platform = \"docker\"\n" + minimalAgent + "[docker]\nimage = \"i\"\nserver_args = [\"server\", \"--https-listen-port=7443\", \"-node-external-ip\", \"203.0.113.5\", \"--token-file=/t\", \"-c\", \"/k3s.yaml\", \"--config=/k.yaml\"]\n",
			[]string{"docker.server_args[5]: --config moves k3s's config file", "docker.server_args[7]: --config moves"}},
		{"k3s's config file is not moved by the containers' environment", "platform = \"docker\"\n" + minimalAgent + "[docker]\nimage = \"i\"\nenv = [\"K3S_CONFIG_FILE=/k3s.yaml\"]\n",
			[]string{"docker.env[0]: K3S_CONFIG_FILE moves k3s's config file"}},
		{"the token file is an absolute path", "token_file = \"token\"\n" + minimalAgent, []string{`token_file: must be an absolute path, got "token"`}},
		{"at least one snapshot is kept", "keep_snapshots = 0\n" + minimalAgent, []string{"keep_snapshots: must be at least 1, got 0"}},
		{"the snapshots' copy goes to an absolute path", "snapshot_copy_dir = \"backup\"\n" + minimalAgent,
			[]string{`snapshot_copy_dir: must be an absolute path, got "backup"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAgent([]byte(tc.toml))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
