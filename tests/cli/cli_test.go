package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

// run runs the fleet-role binary with no kubeconfig of the environment's.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// cluster is a real API server with the fleet's Nodes: the voters v1 and
// v2, the standbys s1 (cordoned) and s2, and a1, no server at all.
func cluster(t *testing.T) *kubeapi.Server {
	s := kubeapi.Start(t)
	ctx := context.Background()
	for name, role := range map[string]string{"v1": api.RoleVoter, "v2": api.RoleVoter, "s1": api.RoleStandby, "s2": api.RoleStandby, "a1": ""} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if role != "" {
			n.Labels[api.LabelRole] = role
		}
		n.Spec.Unschedulable = name == "s1"
		_, err := s.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, ns := range []string{api.Namespace, "ops"} {
		_, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return s
}

func TestNamespaceFlagReachesTheControllerInTheNamespaceItNames(t *testing.T) {
	s := cluster(t)
	out, stderr, code := run(t, "pause", "-n", "ops", "--reason", "a release in ops", "--kubeconfig", s.Kubeconfig)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "paused by ")
	ctx := context.Background()
	cm, err := s.Client.CoreV1().ConfigMaps("ops").Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	require.NoError(t, err, "the pause is in ops")
	assert.Contains(t, cm.Data[api.PauseKey], "a release in ops")
	_, err = s.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "nothing is written in %s: %v", api.Namespace, err)

	out, stderr, code = run(t, "resume", "--namespace", "ops", "--kubeconfig", s.Kubeconfig)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "resumed by ")
	out, _, code = run(t, "resume", "--kubeconfig", s.Kubeconfig)
	assert.Equal(t, 0, code)
	assert.Equal(t, "nothing was paused: swaps start as they did\n", out, "without -n, the configuration's namespace")

	_, stderr, code = run(t, "status", "-n", "Ops_1", "--kubeconfig", s.Kubeconfig)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `-n "Ops_1": not a namespace name: a lowercase RFC 1123 label`)
}

// twoContexts writes a kubeconfig whose current context, away, points at
// nothing, and whose context here points at the API server.
func twoContexts(t *testing.T, s *kubeapi.Server) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, s.WriteEmbeddedKubeconfig(path))
	cfg, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	here := cfg.Contexts[cfg.CurrentContext]
	away := *cfg.Clusters[here.Cluster]
	away.Server = "https://127.0.0.1:1"
	cfg.Clusters["away"] = &away
	cfg.Contexts["here"] = here
	cfg.Contexts["away"] = &clientcmdapi.Context{Cluster: "away", AuthInfo: here.AuthInfo}
	delete(cfg.Contexts, cfg.CurrentContext)
	cfg.CurrentContext = "away"
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func TestContextFlagUsesTheKubeconfigsContextItNamesAndRefusesOneItLacks(t *testing.T) {
	s := cluster(t)
	kc := twoContexts(t, s)
	_, stderr, code := run(t, "resume", "--kubeconfig", kc)
	assert.Equal(t, 1, code, "the current context reaches nothing")
	assert.Contains(t, stderr, "127.0.0.1:1")
	out, stderr, code := run(t, "resume", "--kubeconfig", kc, "--context", "here")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "nothing was paused: swaps start as they did\n", out)

	_, stderr, code = run(t, "status", "--kubeconfig", kc, "--context", "nosuch")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `no context "nosuch" in it; it has away, here`)

	out, _, code = run(t, "__complete", "status", "--kubeconfig", kc, "--context", "")
	require.Equal(t, 0, code)
	assert.Equal(t, []string{"away", "here", ":4"}, completions(out), "the contexts complete")
}

// completions are the lines cobra's __complete prints, its trailing
// "Completion ended" note left out.
func completions(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && !strings.HasPrefix(l, "Completion ended") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestSwapCompletesVotersForOutAndStandbysForIn(t *testing.T) {
	s := cluster(t)
	out, stderr, code := run(t, "__complete", "swap", "--kubeconfig", s.Kubeconfig, "")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{"v1\tvoter, not Ready", "v2\tvoter, not Ready", ":4"}, completions(out))
	out, _, _ = run(t, "__complete", "swap", "--kubeconfig", s.Kubeconfig, "v2", "")
	assert.Equal(t, []string{"s1\tstandby, cordoned, not Ready", "s2\tstandby, not Ready", ":4"}, completions(out))
	out, _, _ = run(t, "__complete", "swap", "--kubeconfig", s.Kubeconfig, "v2", "s")
	assert.Equal(t, []string{"s1\tstandby, cordoned, not Ready", "s2\tstandby, not Ready", ":4"}, completions(out))
	out, _, _ = run(t, "__complete", "swap", "--kubeconfig", s.Kubeconfig, "v2", "s2", "")
	assert.Equal(t, []string{":4"}, completions(out), "no third argument")
	out, _, _ = run(t, "__complete", "swap", "--cancel", "--kubeconfig", s.Kubeconfig, "")
	assert.Equal(t, []string{":4"}, completions(out), "--cancel takes no argument")

	out, _, _ = run(t, "__complete", "status", "--kubeconfig", s.Kubeconfig, "-n", "")
	assert.Subset(t, completions(out), []string{"ops", api.Namespace, "default"}, "-n completes the namespaces")
	out, _, _ = run(t, "__complete", "swap", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "")
	assert.Contains(t, out, "the cluster cannot be reached:", "a completion says why it has none")
}

// swap --override completes the overrides not named yet, each with what
// it passes, without reaching the cluster.
func TestSwapOverrideCompletesTheOverridesNotNamedYetWithWhatEachPasses(t *testing.T) {
	out, stderr, code := run(t, "__complete", "swap", "v2", "s2", "--override", "")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{"pause\tstart while the controller is paused", "holds\tstart while a hold is in force (kured, an upgrade, an alert)",
		"domains\tstart though a majority of the voters end in one failure domain", ":4"}, completions(out))
	out, _, _ = run(t, "__complete", "swap", "v2", "s2", "--override", "pause", "--override", "pause,")
	assert.Equal(t, []string{"pause,holds\tstart while a hold is in force (kured, an upgrade, an alert)",
		"pause,domains\tstart though a majority of the voters end in one failure domain", ":4"}, completions(out))
}

// swap --dry-run against an API server reads the fleet, says each reason
// the swap would not start for and the steps it would take, and writes
// nothing: no fleet-role-status ConfigMap, no Lease.
func TestSwapDryRunAgainstAnAPIServerSaysWhyItWouldNotStartAndWritesNothing(t *testing.T) {
	s := cluster(t)
	// v2's server is k3s's etcd server with its member, as k3s labels it.
	_, err := s.Client.CoreV1().Nodes().Patch(context.Background(), "v2", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+api.LabelEtcd+`":"true"},"annotations":{"`+api.AnnotationEtcdNodeName+`":"v2-0ac16eda"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	out, stderr, code := run(t, "swap", "--dry-run", "v2", "s2", "--override", "holds", "--kubeconfig", s.Kubeconfig)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "dry run, nothing written: swap v2 out for s2 in, by ")
	assert.Contains(t, out, ", past: holds\n")
	assert.Contains(t, out, "would start: no; held or refused, each reason:\n  - is refused: s2 has no fresh probe sample\n")
	assert.Contains(t, out, "holds: unknown, the controller has published none\n")
	assert.Contains(t, out, "steps, in order:\n   1. start\n")
	ctx := context.Background()
	_, err = s.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no request written: %v", err)
	_, err = s.Client.CoordinationV1().Leases(api.Namespace).Get(ctx, api.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Lease taken: %v", err)

	out, stderr, code = run(t, "swap", "--dry-run", "v2", "s2", "-o", "json", "--kubeconfig", s.Kubeconfig)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, `"start": false`)
	assert.Contains(t, out, `"is refused: s2 has no fresh probe sample"`)
}

func TestOutputFlagsCompleteTheValuesEachCommandTakes(t *testing.T) {
	for cmd, want := range map[string][]string{
		"status":  {"wide", "json", "yaml"},
		"history": {"wide", "json", "yaml"},
		"members": {"wide", "json", "yaml"},
		"plan":    {"json", "yaml", "text", "wide"},
		"swap":    {"json", "yaml"},
	} {
		out, _, code := run(t, "__complete", cmd, "-o", "")
		require.Equal(t, 0, code)
		assert.Equal(t, append(want, ":4"), completions(out), cmd)
	}
	out, _, _ := run(t, "__complete", "controller", "--log-level", "")
	assert.Equal(t, []string{"debug", "info", "warn", "error", ":4"}, completions(out))
	out, _, _ = run(t, "__complete", "config", "validate", "--kind", "")
	assert.Equal(t, []string{"agent", "controller", ":4"}, completions(out))
}

func TestEveryCommandsHelpHasExamples(t *testing.T) {
	for _, cmd := range [][]string{{}, {"agent"}, {"controller"}, {"swap"}, {"pause"}, {"resume"}, {"status"}, {"history"},
		{"members"}, {"plan"}, {"config"}, {"config", "validate"}, {"config", "default"}, {"version"}} {
		out, stderr, code := run(t, append([]string{"help"}, cmd...)...)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, out, "\nExamples:\n  ", "fleet-role help %s", strings.Join(cmd, " "))
		assert.Contains(t, out, "  fleet-role "+strings.Join(cmd, " "), "an example of fleet-role %s runs it", strings.Join(cmd, " "))
	}
}

func TestHelpOfNoSuchTopicExits2WithSuggestionsAndVIsNoVersionFlag(t *testing.T) {
	_, stderr, code := run(t, "help", "stauts")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "Did you mean this?\n\tstatus")
	_, stderr, code = run(t, "-v")
	assert.Equal(t, 2, code, "-v is kept for verbosity: %s", stderr)
	out, _, code := run(t, "--version")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, testhost.Version)
}

func TestArgumentErrorsNameWhatIsExpectedAndExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"swap", "v1"}, "swap: want OUT, the voter to swap out, and IN, the standby to swap in: got 1 argument(s) [\"v1\"]\n\nUsage: fleet-role swap OUT IN [--override pause|holds|domains]... [--dry-run] | swap --cancel"},
		{[]string{"resume", "extra"}, `resume takes no arguments: got ["extra"]`},
		{[]string{"config", "default", "agnet"}, `config default: "agnet" is not one of agent, controller`},
		{[]string{"swap", "--wait", "--cancel"}, "--wait follows the swap a request starts"},
		{[]string{"swap", "--wait", "--timeout", "-1s", "v1", "s1"}, "--timeout -1s: must not be negative"},
	} {
		_, stderr, code := run(t, tc.args...)
		assert.Equal(t, 2, code, "%q: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}
