package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// A package version before the one upgraded to: a build after a tag, and
// the next release's candidate.
const (
	oldVersion = "0.1.0+2.g1234567"
	newVersion = "0.2.0~rc.1"
)

// packageFormat is how a host installs, upgrades and removes one format.
type packageFormat struct {
	ext     string
	install []string
	upgrade []string
	// reinstall installs the same version over itself.
	reinstall []string
	remove    []string
	version   []string
	licence   string
}

var packageFormats = []packageFormat{
	{
		ext:       "deb",
		install:   []string{"dpkg", "-i"},
		upgrade:   []string{"dpkg", "-i"},
		reinstall: []string{"dpkg", "-i"},
		remove:    []string{"dpkg", "-r", "fleet-role"},
		version:   []string{"dpkg-query", "-W", "-f", "${Version}", "fleet-role"},
		licence:   "/usr/share/doc/fleet-role/copyright",
	},
	{
		// Note: rpm on the Debian host, which has no RPM database of
		// /bin/sh and the like, hence --nodeps.
		ext:       "rpm",
		install:   []string{"rpm", "-i", "--nodeps"},
		upgrade:   []string{"rpm", "-U", "--nodeps"},
		reinstall: []string{"rpm", "-U", "--nodeps", "--replacepkgs"},
		remove:    []string{"rpm", "-e", "--nodeps", "fleet-role"},
		version:   []string{"rpm", "-q", "--qf", "%{VERSION}", "fleet-role"},
		licence:   "/usr/share/licenses/fleet-role/LICENSE",
	},
}

// makePackages runs make package with the version given and returns the
// .deb's and the .rpm's paths by extension.
func makePackages(t *testing.T, version string) map[string]string {
	t.Helper()
	bin := t.TempDir()
	make := exec.Command("make", "package", "BIN="+bin, "VERSION="+version)
	make.Dir = testhost.Root()
	var out bytes.Buffer
	make.Stdout, make.Stderr = &out, &out
	require.NoError(t, make.Run(), out.String())
	files := map[string]string{}
	for _, ext := range []string{"deb", "rpm"} {
		m, _ := filepath.Glob(filepath.Join(bin, "*."+ext))
		require.Len(t, m, 1, "%s: %s", ext, out.String())
		files[ext] = m[0]
	}
	return files
}

// unit reads properties of the agent's unit on the host.
func unit(t *testing.T, h *testhost.SystemdHost, props ...string) map[string]string {
	t.Helper()
	out := h.Exec(t, "systemctl", "show", "fleet-role-agent.service", "-p", strings.Join(props, ","))
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	return got
}

// shell runs a command on the host whose failure is an answer, not an
// error, and returns its trimmed output.
func shell(t *testing.T, h *testhost.SystemdHost, script string) string {
	t.Helper()
	return h.Exec(t, "sh", "-c", script+" || true")
}

func TestAnUpgradeRestartsTheAgentOnTheNewBinaryAndARemovalStopsAndDisablesIt(t *testing.T) {
	testhost.RequireImage(t, testhost.SystemdImage)
	api := kubeapi.Start(t)
	_, err := api.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "runner-09"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	old, next := makePackages(t, oldVersion), makePackages(t, newVersion)

	// The host's configuration, as the operator writes it.
	cfg := strings.Replace(string(config.DefaultAgentTOML()), `node_name = "runner-01"`, `node_name = "runner-09"`, 1)
	cfg = strings.Replace(cfg, `agent_env_file = "/etc/systemd/system/k3s-agent.service.env"`, `agent_env_file = "/run/fleet-role-test/k3s-agent.env"`, 1)
	dir := t.TempDir()
	agentTOML, kubeconfig := filepath.Join(dir, "agent.toml"), filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(agentTOML, []byte(cfg), 0o600))
	require.NoError(t, api.WriteEmbeddedKubeconfig(kubeconfig))

	for _, f := range packageFormats {
		t.Run(f.ext, func(t *testing.T) {
			h := testhost.StartSystemdHost(t, "--network", "host")
			if f.ext == "rpm" && shell(t, h, "command -v rpm") == "" {
				testhost.Unavailable(t, "no rpm in %s: run tests/images/build-images.sh", testhost.SystemdImage)
			}
			testhost.Docker(t, "cp", old[f.ext], h.Name+":/tmp/old."+f.ext)
			testhost.Docker(t, "cp", next[f.ext], h.Name+":/tmp/new."+f.ext)
			journal := func() string {
				return h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager", "-n", "30")
			}

			// A fresh install loads the unit and starts nothing.
			h.Exec(t, append(f.install, "/tmp/old."+f.ext)...)
			assert.Equal(t, oldVersion, h.Exec(t, f.version...))
			assert.Equal(t, map[string]string{"LoadState": "loaded", "ActiveState": "inactive", "UnitFileState": "disabled"},
				unit(t, h, "LoadState", "ActiveState", "UnitFileState"))
			assert.Contains(t, h.Exec(t, "head", "-c", "200", f.licence), "Apache License")

			// The operator configures the host, enables and starts the agent.
			testhost.Docker(t, "cp", agentTOML, h.Name+":/etc/fleet-role/agent.toml")
			testhost.Docker(t, "cp", kubeconfig, h.Name+":/etc/fleet-role/kubeconfig")
			h.Exec(t, "sh", "-c", "echo agent > /var/lib/fleet-role/role")
			h.Exec(t, "systemctl", "enable", "--now", "fleet-role-agent.service")
			before := unit(t, h, "ActiveState", "MainPID")
			require.Equal(t, "active", before["ActiveState"], "journal:\n%s", journal())
			assert.Equal(t, "/usr/bin/fleet-role", h.Exec(t, "readlink", "/proc/"+before["MainPID"]+"/exe"))

			// The upgrade: the old package's scripts leave the agent
			// running (try-restart starts no stopped unit), the new one's
			// restart it on the new binary; it stays enabled.
			h.Exec(t, append(f.upgrade, "/tmp/new."+f.ext)...)
			assert.Equal(t, newVersion, h.Exec(t, f.version...))
			after := unit(t, h, "ActiveState", "MainPID", "UnitFileState")
			assert.Equal(t, "active", after["ActiveState"], "journal:\n%s", journal())
			assert.Equal(t, "enabled", after["UnitFileState"])
			assert.NotEqual(t, before["MainPID"], after["MainPID"], "restarted")
			assert.Equal(t, "/usr/bin/fleet-role", h.Exec(t, "readlink", "/proc/"+after["MainPID"]+"/exe"),
				"the new binary, not the old one deleted")
			assert.True(t, strings.HasPrefix(h.Exec(t, "fleet-role", "--version"), "fleet-role "+newVersion+"\n"))
			assert.Contains(t, h.Exec(t, "cat", "/etc/fleet-role/agent.toml"), `node_name = "runner-09"`, "the configuration kept")

			// An agent stopped by hand stays stopped across an upgrade.
			h.Exec(t, "systemctl", "stop", "fleet-role-agent.service")
			h.Exec(t, append(f.reinstall, "/tmp/new."+f.ext)...)
			assert.Equal(t, map[string]string{"ActiveState": "inactive", "UnitFileState": "enabled"},
				unit(t, h, "ActiveState", "UnitFileState"))
			h.Exec(t, "systemctl", "start", "fleet-role-agent.service")

			// The removal stops and disables the agent, and systemd forgets
			// its unit.
			h.Exec(t, f.remove...)
			assert.Equal(t, "not-found", unit(t, h, "LoadState")["LoadState"])
			assert.Equal(t, "inactive", shell(t, h, "systemctl is-active fleet-role-agent.service"))
			assert.Empty(t, shell(t, h, "ls /etc/systemd/system/multi-user.target.wants/ | grep fleet-role"), "no enablement left behind")
			assert.Empty(t, shell(t, h, "pgrep -x fleet-role"), "no agent left running")
			assert.Empty(t, shell(t, h, "command -v fleet-role"))
		})
	}
}
