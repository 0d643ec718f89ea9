package ansible_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/docker"
	"github.com/fleet-role/fleet-role/tests/helm"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// binary is fleet-role, helmBinary the helm the controller role renders
// the chart with.
var binary, helmBinary string

func TestMain(m *testing.M) {
	h, err := testhost.Helm()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmBinary = h
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

func ansibleDir() string { return filepath.Join(testhost.Root(), "ansible") }

// tool runs an Ansible tool from the ansible directory; under CI a missing
// tool fails the test, elsewhere it skips it.
func tool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testhost.Unavailable(t, "%s is not installed: apt-get install ansible ansible-lint yamllint python3-kubernetes python3-docker (.ci/run does)", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = ansibleDir()
	cmd.Env = append(os.Environ(), "ANSIBLE_NOCOLOR=1", "ANSIBLE_FORCE_COLOR=0", "PY_COLORS=0", "ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var recap = regexp.MustCompile(`(?m)^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)`)

// changed sums the changed tasks of a play recap, failing on a failure.
func changed(t *testing.T, out string) int {
	t.Helper()
	m := recap.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, m, "no play recap:\n%s", out)
	total := 0
	for _, r := range m {
		require.Equal(t, "0", r[4], "unreachable:\n%s", out)
		require.Equal(t, "0", r[5], "failed:\n%s", out)
		n, _ := strconv.Atoi(r[3])
		total += n
	}
	return total
}

func playbook(t *testing.T, args ...string) string {
	t.Helper()
	out, err := tool(t, "ansible-playbook", args...)
	require.NoError(t, err, "%s", out)
	return out
}

func TestTheRolesPassYamllintAnsibleLintAndASyntaxCheck(t *testing.T) {
	out, err := tool(t, "yamllint", "-s", ".")
	assert.NoError(t, err, out)
	out, err = tool(t, "ansible-lint", "--offline")
	assert.NoError(t, err, out)
	assert.Contains(t, out, "Passed with production profile")
	out, err = tool(t, "ansible-playbook", "-i", "inventory.example.yml", "deploy.yml", "--syntax-check")
	assert.NoError(t, err, out)
}

// prefixInventory is one local host, a server of a fleet of three
// servers and a standby.
func prefixInventory(t *testing.T) string {
	inv := filepath.Join(t.TempDir(), "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte(`all:
  children:
    fleet_servers:
      hosts:
        runner-01: {ansible_connection: local, ansible_host: 10.0.0.1}
        runner-02: {ansible_host: 10.0.0.2}
        runner-03: {ansible_host: 10.0.0.3}
    fleet_standbys:
      hosts:
        runner-09: {ansible_host: 10.0.0.9}
`), 0o644))
	return inv
}

func TestTheAgentRoleIntoAPrefixIsCheckModeSafeAndIdempotent(t *testing.T) {
	prefix := t.TempDir()
	stageServer(t, prefix)
	play := filepath.Join(t.TempDir(), "agent.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: runner-01
  gather_facts: false
  roles:
    - role: fleet_role_agent
`), 0o644))
	args := []string{"-i", prefixInventory(t), play, "-e", "fleet_role_agent_prefix=" + prefix,
		"-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary=" + binary,
		"-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "fleet_role_agent_credentials=false"}
	out := playbook(t, append(args, "--check", "--diff")...)
	assert.Positive(t, changed(t, out), "check mode reports what it would change")
	assert.NoFileExists(t, filepath.Join(prefix, "etc", "fleet-role", "agent.toml"), "check mode changes nothing")

	assert.Positive(t, changed(t, playbook(t, args...)))
	assert.Zero(t, changed(t, playbook(t, args...)), "a second run changes nothing")

	conf := filepath.Join(prefix, "etc", "fleet-role", "agent.toml")
	a, err := config.LoadAgent(conf)
	require.NoError(t, err)
	assert.Equal(t, "runner-01", a.NodeName)
	assert.Equal(t, config.PlatformSystemd, a.Platform)
	// A standby is a server of the inventory too: once promoted, the
	// others' agents join through it.
	assert.Equal(t, []config.Server{{Name: "runner-01", Address: "10.0.0.1"}, {Name: "runner-02", Address: "10.0.0.2"},
		{Name: "runner-03", Address: "10.0.0.3"}, {Name: "runner-09", Address: "10.0.0.9"}}, a.Servers)
	role, err := os.ReadFile(filepath.Join(prefix, "var", "lib", "fleet-role", "role"))
	require.NoError(t, err)
	assert.Equal(t, "server\n", string(role), "a server's role file starts as server")
	assert.FileExists(t, filepath.Join(prefix, "usr", "bin", "fleet-role"))
	assert.FileExists(t, filepath.Join(prefix, "etc", "systemd", "system", "fleet-role-agent.service"))
	assert.Equal(t, "/etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml", a.JoinFile)
	assert.DirExists(t, filepath.Join(prefix, "etc", "rancher", "k3s", "config.yaml.d"), "the drop-in directory the hardened agent unit may write")
}

func TestTheAgentRoleGivesADockerHostsK3sContainersTheTokenFileTheirConfigAndANodeDir(t *testing.T) {
	prefix := t.TempDir()
	stageServer(t, prefix)
	play := filepath.Join(t.TempDir(), "agent.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: runner-01
  gather_facts: false
  roles:
    - role: fleet_role_agent
`), 0o644))
	args := []string{"-i", prefixInventory(t), play, "-e", "fleet_role_agent_prefix=" + prefix,
		"-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary=" + binary,
		"-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "fleet_role_agent_platform=docker",
		"-e", "fleet_role_agent_credentials=false", "-e", "fleet_role_agent_docker_image=" + testhost.SystemdImage}

	out, err := tool(t, "ansible-playbook", args...)
	require.Error(t, err, "a Docker host without the cluster's token")
	assert.Contains(t, out, "fleet_role_agent_k3s_token is required")

	const token = "K10secret::server:0123456789abcdef"
	args = append(args, "-e", "fleet_role_agent_k3s_token="+token, "-e", `{"fleet_role_agent_docker_agent_args": ["--node-label=example.com/team=ci"]}`)
	out = playbook(t, args...)
	assert.Positive(t, changed(t, out))
	assert.NotContains(t, out, token, "the token is not logged")
	assert.Zero(t, changed(t, playbook(t, args...)), "a second run changes nothing")

	tokenFile := filepath.Join(prefix, "etc", "fleet-role", "k3s-token")
	fi, err := os.Stat(tokenFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the token file is 0600")
	b, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	assert.Equal(t, token+"\n", string(b))
	for _, d := range []string{"etc/rancher/k3s/config.yaml.d", "etc/rancher/node"} {
		assert.DirExists(t, filepath.Join(prefix, d))
	}

	conf := filepath.Join(prefix, "etc", "fleet-role", "agent.toml")
	a, err := config.LoadAgent(conf)
	require.NoError(t, err)
	assert.Equal(t, config.PlatformDocker, a.Platform)
	assert.Equal(t, []string{"server", "--token-file=/etc/fleet-role/k3s-token"}, a.Docker.ServerArgs)
	assert.Equal(t, []string{"agent", "--token-file=/etc/fleet-role/k3s-token", "--node-label=example.com/team=ci"}, a.Docker.AgentArgs)
	assert.Equal(t, []string{
		"/var/lib/rancher/k3s:/var/lib/rancher/k3s",
		"/etc/fleet-role/k3s-token:/etc/fleet-role/k3s-token:ro",
		"/etc/rancher/k3s:/etc/rancher/k3s",
		"/etc/rancher/node:/etc/rancher/node",
	}, a.Docker.Volumes)
	assert.Empty(t, a.Docker.Env)
	rendered, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.NotContains(t, string(rendered), token, "the agent's configuration does not hold the token")

	// The rendered configuration drives the Docker backend: the host's
	// paths are the prefix's, the data volume the test's own.
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	d := a.Docker
	d.Image = testhost.Standin(t)
	d.ServerContainer, d.AgentContainer = "fleet-role-test-server-"+id, "fleet-role-test-agent-"+id
	d.Network, d.Privileged = "none", false
	for i, v := range d.Volumes {
		if strings.HasPrefix(v, "/") {
			d.Volumes[i] = prefix + v
		} else {
			d.Volumes[i] = "fleet-role-test-data-" + id + ":/var/lib/rancher/k3s"
		}
	}
	p, err := docker.New(docker.Config{Image: d.Image, ServerContainer: d.ServerContainer, AgentContainer: d.AgentContainer,
		ServerArgs: d.ServerArgs, AgentArgs: d.AgentArgs, Volumes: d.Volumes, Network: d.Network, Env: d.Env,
		StopTimeout: time.Second, Labels: map[string]string{"fleet-role-test": "1"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Close()
		_ = exec.Command("docker", "rm", "-f", d.ServerContainer, d.AgentContainer).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", "fleet-role-test-data-"+id).Run()
	})
	ctx := context.Background()
	for _, u := range platform.Units {
		_, err := p.Start(ctx, u, platform.StartOptions{ServerURL: "https://10.0.0.2:6443"})
		require.NoError(t, err)
		name := map[platform.Unit]string{platform.Server: d.ServerContainer, platform.Agent: d.AgentContainer}[u]
		inspect := testhost.Docker(t, "inspect", name)
		assert.NotContains(t, inspect, token, "docker inspect of the %s container does not show the token", u)
		mounts := testhost.Docker(t, "inspect", "-f", "{{range .Mounts}}{{.Destination}}={{.RW}} {{end}}", name)
		for _, m := range []string{"/etc/fleet-role/k3s-token=false", "/etc/rancher/k3s=true", "/etc/rancher/node=true"} {
			assert.Contains(t, mounts, m, "the %s container", u)
		}
		assert.Contains(t, testhost.Docker(t, "inspect", "-f", "{{.Config.Cmd}}", name), "--token-file=/etc/fleet-role/k3s-token")
	}
}

// agentKubeconfig is a kubeconfig, its CA inline, acting as the node's
// agent through the administrator's right to impersonate.
func agentKubeconfig(t *testing.T, kube *kubeapi.Server, node string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, kube.WriteImpersonatingKubeconfig(path, "system:serviceaccount:fleet-role:fleet-role-agent-"+node))
	kc, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	for _, c := range kc.Clusters {
		ca, err := os.ReadFile(c.CertificateAuthority)
		require.NoError(t, err)
		c.CertificateAuthorityData, c.CertificateAuthority = ca, ""
	}
	b, err := clientcmd.Write(*kc)
	require.NoError(t, err)
	return string(b)
}

func TestTheAgentRoleInstallsAndStartsTheAgentOnASystemdHost(t *testing.T) {
	kube := kubeapi.Start(t)
	h := testhost.StartSystemdHost(t, "--network", "host")
	ctx := context.Background()
	_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "runner-04"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	grant(t, kube, "runner-04")

	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte(fmt.Sprintf(`all:
  children:
    fleet_servers:
      hosts:
        runner-01: {ansible_host: 10.0.0.1}
        runner-02: {ansible_host: 10.0.0.2}
    fleet_standbys:
      hosts:
        runner-04:
          ansible_connection: community.docker.docker
          ansible_host: %s
          ansible_python_interpreter: /usr/bin/python3
`, h.Name)), 0o644))
	// A standby staged as k3s's installer leaves one (the image has
	// k3s.service) with the operator's configuration.
	h.Exec(t, "sh", "-c", "mkdir -p /etc/rancher/k3s && echo 'token-file: /etc/rancher/k3s/token' > /etc/rancher/k3s/config.yaml")
	kc := filepath.Join(dir, "kc.yml")
	content := agentKubeconfig(t, kube, "runner-04")
	require.NoError(t, os.WriteFile(kc, []byte("fleet_role_agent_kubeconfig_content: |\n  "+strings.ReplaceAll(strings.TrimSpace(content), "\n", "\n  ")+"\n"), 0o644))
	play := filepath.Join(dir, "agent.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: runner-04
  roles:
    - role: fleet_role_agent
`), 0o644))
	args := []string{"-i", inv, play, "-e", "fleet_role_agent_binary=" + binary, "-e", "@" + kc,
		"-e", "fleet_role_agent_systemd_agent_env_file=/run/fleet-role-test/k3s-agent.env",
		"-e", "fleet_role_agent_etcd_endpoint=http://127.0.0.1:1"}
	out := playbook(t, append(args, "--check")...)
	assert.Positive(t, changed(t, out), "check mode on a fresh host")
	assert.Positive(t, changed(t, playbook(t, args...)))
	assert.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "fleet-role-agent.service"))
	assert.Equal(t, "enabled", h.Exec(t, "systemctl", "is-enabled", "fleet-role-agent.service"))
	rendered := h.Exec(t, "cat", "/etc/fleet-role/agent.toml")
	assert.Contains(t, rendered, `node_name = "runner-04"`)
	assert.Contains(t, h.Exec(t, "cat", "/var/lib/fleet-role/role"), "agent")
	start := h.Exec(t, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value", "fleet-role-agent.service")
	assert.Zero(t, changed(t, playbook(t, args...)), "a second run changes nothing")
	assert.Equal(t, start, h.Exec(t, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value", "fleet-role-agent.service"),
		"and restarts nothing")
	// The agent it started answers on the Node: its probe.
	require.Eventually(t, func() bool {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, "runner-04", metav1.GetOptions{})
		return err == nil && n.Annotations[api.AnnotationProbe] != ""
	}, 30*time.Second, 200*time.Millisecond, "journal:\n%s", h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager", "-n", "30"))

	// A changed variable re-renders the config and restarts the agent.
	playbook(t, append(args, "-e", "fleet_role_agent_probe_period=30s", "-e", "fleet_role_agent_fsync_limit=25ms")...)
	rendered = h.Exec(t, "cat", "/etc/fleet-role/agent.toml")
	assert.Contains(t, rendered, `probe_period = "30s"`)
	assert.Contains(t, rendered, "[probe]\nfsync_limit = \"25ms\"\nread_limit = \"100ms\"\n")
	assert.NotEqual(t, start, h.Exec(t, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value", "fleet-role-agent.service"),
		"the handler restarted it")
}

func grant(t *testing.T, kube *kubeapi.Server, node string) {
	b, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "agent-rbac.yaml.j2"))
	require.NoError(t, err)
	kubeapi.Apply(t, kube.Client, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+api.Namespace+"\n"))
	kubeapi.Apply(t, kube.Client, []byte(strings.ReplaceAll(string(b), "{{ node_name }}", node)))
}

func TestTheControllerRoleAppliesTheControllerToTheRealAPIServer(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	render := t.TempDir()
	inv := filepath.Join(t.TempDir(), "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte(`all:
  children:
    fleet_servers:
      hosts:
        runner-01: {ansible_host: 10.0.0.1}
    fleet_agents:
      hosts:
        runner-05: {ansible_host: 10.0.0.5}
`), 0o644))
	play := controllerPlay(t)
	// A hold, whose RBAC the chart grants in kube-system, and a
	// notification URL with a token, which the role keeps in a Secret.
	const secretURL = "generic://hooks.example/fleet?token=s3cr3t"
	settings := writeVars(t, map[string]any{
		"fleet_role_controller_holds":              map[string]any{"kured": map[string]any{"namespace": "kube-system"}},
		"fleet_role_controller_notify_secret_urls": []string{secretURL},
	})
	args := []string{"-i", inv, play, "-e", "fleet_role_controller_kubeconfig=" + kube.Kubeconfig, "-e", "fleet_role_controller_binary=" + binary, "-e", "fleet_role_controller_helm=" + helmBinary,
		"-e", "fleet_role_controller_render_dir=" + render, "-e", "fleet_role_controller_wait=false",
		"-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "@" + settings}

	// Check mode on a fresh cluster: a server-side dry run that keeps nothing.
	out := playbook(t, append(args, "--check")...)
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "The namespace fleet-role does not exist yet")
	_, err := kube.Client.CoreV1().Namespaces().Get(ctx, api.Namespace, metav1.GetOptions{})
	assert.Error(t, err, "nothing kept by the dry run")
	_, err = kube.Client.RbacV1().ClusterRoles().Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	assert.Error(t, err, "nothing kept by the dry run")

	playbook(t, args...)
	dep, err := kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ownImage(t), dep.Spec.Template.Spec.Containers[0].Image, "fleet-role's own image, tagged with the binary's version")
	assert.Equal(t, "fleet-role-controller-config", dep.Spec.Template.Spec.Volumes[0].ConfigMap.Name, "the Deployment carries the rendered config")
	cm, err := kube.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, "fleet-role-controller-config", metav1.GetOptions{})
	require.NoError(t, err)
	c, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err)
	assert.True(t, c.DryRun, "a dry run unless told otherwise")
	_, err = kube.Client.CoreV1().ServiceAccounts(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	assert.NoError(t, err)
	assert.Equal(t, "kube-system/kured", c.Holds.KuredDaemonSet, "the hold configured")
	_, err = kube.Client.RbacV1().RoleBindings("kube-system").Get(ctx, "fleet-role-controller-kured", metav1.GetOptions{})
	assert.NoError(t, err, "and granted what it reads")
	secret, err := kube.Client.CoreV1().Secrets(api.Namespace).Get(ctx, "fleet-role-notify", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, secretURL+"\n", string(secret.Data["urls"]), "the URL with a token in the Secret")
	assert.Equal(t, "fleet-role-notify", dep.Spec.Template.Spec.Volumes[1].Secret.SecretName, "which the controller mounts")
	assert.Equal(t, "/etc/fleet-role-notify/urls", c.Notify.URLsFile)
	assert.NotContains(t, cm.Data["controller.toml"], "s3cr3t", "and not in the ConfigMap")
	out = playbook(t, args...)
	assert.Zero(t, changed(t, out), "a second run changes nothing")
	assert.NotContains(t, out, "s3cr3t", "the token is never logged")

	// The rendered manifests decode strictly into their types, and are the
	// chart's objects for the same settings (each agent's RBAC is the
	// agent role's).
	manifests, err := os.ReadFile(filepath.Join(render, "fleet-role.yaml"))
	require.NoError(t, err)
	objs, err := kubeapi.Decode(manifests)
	require.NoError(t, err)
	assertTheChartsObjects(t, objs, map[string]any{
		"holds":  map[string]any{"kured": map[string]any{"namespace": "kube-system"}},
		"notify": map[string]any{"secretName": "fleet-role-notify"},
	})

	// Check mode on the cluster now: every object tried by the API server,
	// a change reported, nothing kept.
	out = playbook(t, append(args, "--check", "-e", "fleet_role_controller_image=fleet-role:next")...)
	assert.Positive(t, changed(t, out))
	dep, err = kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ownImage(t), dep.Spec.Template.Spec.Containers[0].Image, "the dry run kept nothing")
	out, err = tool(t, "ansible-playbook", append(args, "--check", "-e", "fleet_role_controller_image=registry.example/fleet-role:latest")...)
	require.Error(t, err, out)
	assert.Contains(t, out, "fleet_role_controller_image registry.example/fleet-role:latest names no version")

	// -e dry_run=false flips exactly the config's line.
	before, err := os.ReadFile(filepath.Join(render, "controller.toml"))
	require.NoError(t, err)
	playbook(t, append(args, "-e", "dry_run=false")...)
	after, err := os.ReadFile(filepath.Join(render, "controller.toml"))
	require.NoError(t, err)
	assert.Equal(t, []string{"- dry_run = true", "+ dry_run = false"}, lineDiff(string(before), string(after)))
	cm, err = kube.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, "fleet-role-controller-config", metav1.GetOptions{})
	require.NoError(t, err)
	c, err = config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err)
	assert.False(t, c.DryRun)
}

// assertTheChartsObjects asserts that the role's objects are those the
// chart renders (tests/helm, through Helm's library) with values, the
// namespace made and the image's tag the role gives (the binary's
// version).
func assertTheChartsObjects(t *testing.T, role []runtime.Object, values map[string]any) {
	t.Helper()
	values["namespace"] = map[string]any{"create": true}
	values["image"] = map[string]any{"tag": strings.TrimPrefix(ownImage(t), "fleet-role:")}
	b, err := helm.Render(api.Namespace, values)
	require.NoError(t, err)
	chart, err := kubeapi.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, chart, role)
}

// controllerPlay writes a play of the controller role alone, run on the
// machine Ansible runs on.
func controllerPlay(t *testing.T) string {
	t.Helper()
	play := filepath.Join(t.TempDir(), "controller.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: fleet_role_controller
`), 0o644))
	return play
}

// writeVars writes Ansible variables into a file, for -e @file.
func writeVars(t *testing.T, vars map[string]any) string {
	t.Helper()
	b, err := json.Marshal(vars)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "vars.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

func TestTheControllerRolesVariablesRenderTheObjectsTheChartsValuesDo(t *testing.T) {
	kube := kubeapi.Start(t)
	render := t.TempDir()
	play := controllerPlay(t)
	operators := []any{map[string]any{"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}}
	viewers := []any{map[string]any{"kind": "User", "name": "victor", "apiGroup": "rbac.authorization.k8s.io"}}
	holds := map[string]any{
		"kured":                 map[string]any{"namespace": "kube-system", "name": "reboots"},
		"upgradePlansNamespace": "system-upgrade",
		"prometheus":            map[string]any{"url": "http://prometheus.monitoring:9090", "alertFiringOnly": true},
	}
	metrics := map[string]any{
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	}
	const extra = "[verdicts]\nwindow = 10\n"
	settings := writeVars(t, map[string]any{
		"fleet_role_controller_replicas":           3,
		"fleet_role_controller_period":             "5s",
		"fleet_role_controller_runner_selector":    "runner=yes",
		"fleet_role_controller_extra_config":       extra,
		"fleet_role_controller_holds":              holds,
		"fleet_role_controller_notify_urls":        []string{"generic://hooks.example/fleet"},
		"fleet_role_controller_notify_secret_urls": []string{"generic://hooks.example/fleet?token=s3cr3t"},
		"fleet_role_controller_operators":          operators,
		"fleet_role_controller_viewers":            viewers,
		"fleet_role_controller_metrics":            metrics,
		"fleet_role_controller_values":             map[string]any{"priorityClassName": "", "resources": map[string]any{"limits": map[string]any{"memory": "512Mi"}}},
	})
	// Check mode on a fresh cluster renders everything and tries the
	// cluster's objects (no ServiceMonitor's CRD is needed).
	playbook(t, "-i", "localhost,", play, "--check", "-e", "fleet_role_controller_kubeconfig="+kube.Kubeconfig,
		"-e", "fleet_role_controller_binary="+binary, "-e", "fleet_role_controller_helm="+helmBinary,
		"-e", "fleet_role_controller_render_dir="+render, "-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "@"+settings)

	manifests, err := os.ReadFile(filepath.Join(render, "fleet-role.yaml"))
	require.NoError(t, err)
	objs, err := kubeapi.Decode(manifests)
	require.NoError(t, err, "every object decodes strictly:\n%s", manifests)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	assert.Equal(t, 1, kinds["ServiceMonitor"], "%v", kinds)
	assert.Equal(t, 1, kinds["PrometheusRule"], "%v", kinds)
	// The same settings as a user gives them to helm install.
	assertTheChartsObjects(t, objs, map[string]any{
		"replicas":          3,
		"config":            map[string]any{"period": "5s", "runnerSelector": "runner=yes", "extra": extra},
		"holds":             holds,
		"notify":            map[string]any{"urls": []any{"generic://hooks.example/fleet"}, "secretName": "fleet-role-notify"},
		"access":            map[string]any{"operators": operators, "viewers": viewers},
		"metrics":           metrics,
		"priorityClassName": "",
		"resources":         map[string]any{"limits": map[string]any{"memory": "512Mi"}},
	})
}

// lineDiff lists the lines only in a ("- ") and only in b ("+ ").
func lineDiff(a, b string) []string {
	var out []string
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "- "+x, "+ "+y)
		}
	}
	return out
}

func TestTheDebInstallsOnASystemdHostAndItsUnitStarts(t *testing.T) {
	kube := kubeapi.Start(t)
	h := testhost.StartSystemdHost(t, "--network", "host")
	ctx := context.Background()
	_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "runner-09"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	grant(t, kube, "runner-09")

	// make package: the binary and nfpm, from its Go module.
	make := exec.Command("make", "package", "BIN="+t.TempDir())
	make.Dir = testhost.Root()
	var out bytes.Buffer
	make.Stdout, make.Stderr = &out, &out
	require.NoError(t, make.Run(), out.String())
	debs, _ := filepath.Glob(filepath.Join(make.Args[2][len("BIN="):], "*.deb"))
	require.Len(t, debs, 1, out.String())
	rpms, _ := filepath.Glob(filepath.Join(make.Args[2][len("BIN="):], "*.rpm"))
	assert.Len(t, rpms, 1)

	testhost.Docker(t, "cp", debs[0], h.Name+":/tmp/fleet-role.deb")
	h.Exec(t, "dpkg", "-i", "/tmp/fleet-role.deb")
	assert.Equal(t, "/usr/bin/fleet-role", h.Exec(t, "sh", "-c", "command -v fleet-role"))
	assert.Contains(t, h.Exec(t, "fleet-role", "version"), "fleet-role ")
	assert.Contains(t, h.Exec(t, "cat", "/etc/fleet-role/agent.toml"), `node_name = "runner-01"`, "the example config")

	// The operator writes the host's config; an upgrade keeps it.
	cfg := strings.Replace(string(config.DefaultAgentTOML()), `node_name = "runner-01"`, `node_name = "runner-09"`, 1)
	cfg = strings.Replace(cfg, `kubeconfig = "/etc/fleet-role/kubeconfig"`, `kubeconfig = "/etc/fleet-role/kubeconfig"`, 1)
	cfg = strings.Replace(cfg, `agent_env_file = "/etc/systemd/system/k3s-agent.service.env"`, `agent_env_file = "/run/fleet-role-test/k3s-agent.env"`, 1)
	local := filepath.Join(t.TempDir(), "agent.toml")
	require.NoError(t, os.WriteFile(local, []byte(cfg), 0o600))
	testhost.Docker(t, "cp", local, h.Name+":/etc/fleet-role/agent.toml")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(agentKubeconfig(t, kube, "runner-09")), 0o600))
	testhost.Docker(t, "cp", kc, h.Name+":/etc/fleet-role/kubeconfig")
	h.Exec(t, "sh", "-c", "echo agent > /var/lib/fleet-role/role")
	h.Exec(t, "systemctl", "enable", "fleet-role-agent.service")
	h.Exec(t, "sh", "-c", "systemctl start fleet-role-agent.service || true")
	assert.Equal(t, "active", h.Exec(t, "sh", "-c", "systemctl is-active fleet-role-agent.service || true"),
		"journal:\n%s", h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager", "-n", "30"))

	h.Exec(t, "dpkg", "-i", "--force-confold", "/tmp/fleet-role.deb")
	assert.Contains(t, h.Exec(t, "cat", "/etc/fleet-role/agent.toml"), `node_name = "runner-09"`, "an upgrade keeps the config")
}

// ownImage is fleet-role's own image as make image tags it: the version of
// the binary the roles are given, with neither "~" nor "+".
func ownImage(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(binary, "--version").Output()
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(out), "\n")
	v := first[strings.LastIndex(first, " ")+1:]
	return "fleet-role:" + strings.NewReplacer("~", "-", "+", "-").Replace(v)
}
