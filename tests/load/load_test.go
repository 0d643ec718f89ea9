package load_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// BenchmarkControllerLoad: FLEET_ROLE_LOAD_NODES Nodes (default 5,000),
// ten Pods each, every Node's probe rewritten once a minute; the
// controller binary started against them; three manual swaps run by the
// fleet simulator's hosts.
func BenchmarkControllerLoad(b *testing.B) {
	nodes := 5000
	if v, err := strconv.Atoi(os.Getenv("FLEET_ROLE_LOAD_NODES")); err == nil {
		nodes = v
	}
	for b.Loop() {
		runLoad(b, nodes)
	}
}

func runLoad(b *testing.B, n int) {
	dir := b.TempDir()
	bin, err := testhost.BuildFleetRole(dir)
	if err != nil {
		b.Fatal(err)
	}
	kube := kubeapi.Start(b)
	cfg := rest.CopyConfig(kube.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client := kubernetes.NewForConfigOrDie(cfg)
	sim := fleetsim.New(b, kube.Client, 2*time.Second, 3, 3, 0)
	sim.With(func(d *fleetsim.Driver) {
		for _, h := range d.Hosts {
			h.Staged = true // a demoted voter is a standby for the next swap
		}
	})

	t0 := time.Now()
	others := n - 6
	parallel(16, others, func(i int) error { return createNode(client, fmt.Sprintf("a%05d", i)) })
	parallel(16, others*10, func(i int) error {
		node := fmt.Sprintf("a%05d", i/10)
		_, err := client.CoreV1().Pods("apps").Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%s-%d", node, i%10), Namespace: "apps",
				Labels: map[string]string{"app": "web", "pod-template-hash": "5d8f7c9b6"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27",
				Env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 64)}}}}},
		}, metav1.CreateOptions{})
		return err
	})
	b.Logf("created %d Nodes and %d Pods in %s", n, others*10+12, time.Since(t0).Round(time.Second))

	// Probes churn: every Node's agent writes its sample once a minute.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() { churn(client, others, stop) })

	port := freePort(b)
	conf := filepath.Join(dir, "controller.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf(`version = 1
probe_period = "2s"
listen_address = "127.0.0.1:%d"
[bounds]
join = "1m"
`, port)), 0o600)
	var logs testhost.SyncBuffer
	cmd := exec.Command(bin, "controller", "--config", conf, "--kubeconfig", kube.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	waitFor(b, 2*time.Minute, func() bool { return metric(metrics, "fleet_role_pass_seconds_count") > 0 }, &logs)
	firstPass := time.Since(start)

	swaps := [][2]string{{"v1", "s1"}, {"v2", "s2"}, {"v3", "s3"}, {"s1", "v1"}, {"s2", "v2"}, {"s3", "v3"}, {"v1", "s1"}, {"v2", "s2"}}
	for _, s := range swaps {
		out, err := exec.Command(bin, "swap", s[0], s[1], "--kubeconfig", kube.Kubeconfig).CombinedOutput()
		if err != nil {
			b.Fatalf("swap %v: %v: %s", s, err, out)
		}
		waitFor(b, 5*time.Minute, func() bool {
			st := status(kube.Client)
			return st.Swap == nil && st.Last != nil && st.Last.Out == s[0]
		}, &logs)
		if r := status(kube.Client).Last; r.Result != api.ResultCompleted {
			b.Fatalf("swap %v ended %s: %s", s, r.Result, r.Reason)
		}
	}
	if path := os.Getenv("FLEET_ROLE_LOAD_LOG"); path != "" {
		var b strings.Builder
		for _, w := range sim.Written() {
			fmt.Fprintf(&b, "report %s %s %s %s\n", w.At.UTC().Format(time.RFC3339Nano), w.Node, w.Action, w.State)
		}
		_ = os.WriteFile(path, []byte(logs.String()+b.String()), 0o644)
	}
	lat := latencies(sim.Written(), logs.String())
	if len(lat) == 0 {
		b.Fatalf("no report was followed by an action; log:\n%s", logs.String())
	}
	slices.Sort(lat)
	m := testhost.Memory(cmd.Process.Pid)
	b.ReportMetric(m["VmRSS"], "rss-MiB")
	b.ReportMetric(m["VmHWM"], "peak-rss-MiB")
	b.ReportMetric(firstPass.Seconds(), "first-pass-s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "report-to-action-p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Milliseconds()), "report-to-action-p99-ms")
	b.ReportMetric(float64(len(lat)), "reports")
	b.ReportMetric(metric(metrics, "fleet_role_pass_seconds_sum")/metric(metrics, "fleet_role_pass_seconds_count")*1000, "pass-avg-ms")
}

func createNode(c kubernetes.Interface, name string) error {
	p, _ := json.Marshal(api.Probe{At: time.Now().UTC(), Period: api.Duration(time.Minute), Healthy: true, FsyncP99Ms: 2.1})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{api.LabelRole: api.RoleAgent, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
			"node.kubernetes.io/instance-type": "runner-large", "topology.kubernetes.io/zone": "zone-a"},
		Annotations: map[string]string{api.AnnotationProbe: string(p), "node.alpha.kubernetes.io/ttl": "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}
	_, err := c.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	return err
}

// churn rewrites one Node's probe at a time, so each is written once a
// minute, as the agents' probes are.
func churn(c kubernetes.Interface, n int, stop chan struct{}) {
	every := time.Minute / time.Duration(max(n, 1))
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p, _ := json.Marshal(api.Probe{At: time.Now().UTC(), Period: api.Duration(time.Minute), Healthy: true, FsyncP99Ms: 1 + rand.Float64()*3})
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationProbe: string(p)}}})
		_, _ = c.CoreV1().Nodes().Patch(context.Background(), fmt.Sprintf("a%05d", i%n), types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// latencies pairs each report the simulator wrote with the action it lets
// the controller take next: a snapshot's with the candidate's cordon, a
// step-down's with the member's removal, a finished demotion's with the
// clean-up (when the member-gone annotation came before it). Other
// actions wait on other things (k3s promoting a learner, the voters'
// next probes), not on the controller.
func latencies(reports []fleetsim.Written, log string) []time.Duration {
	type action struct {
		at        time.Time
		typ, node string
	}
	var acts []action
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, ` msg="action taken" `) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err == nil {
			acts = append(acts, action{at, field(line, "action"), field(line, "node")})
		}
	}
	next := map[string]string{api.RequestSnapshot: api.ActionCordonIn, api.RequestStepDown: api.ActionRemoveMember,
		api.ReportFinish: api.ActionCleanUp}
	var out []time.Duration
	for _, r := range reports {
		want, ok := next[r.Action]
		if r.State != api.StateDone || !ok {
			continue
		}
		for i, a := range acts {
			if !a.at.After(r.At) {
				continue
			}
			if a.typ == want && (r.Action == api.RequestSnapshot || a.node == r.Node) {
				if r.Action != api.ReportFinish || (i > 0 && acts[i-1].typ == api.ActionMemberGone && acts[i-1].at.Before(r.At)) {
					out = append(out, a.at.Sub(r.At))
				}
				break
			}
		}
	}
	return out
}

// field reads key=value from a log line.
func field(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return strings.Trim(v, `"`)
}

func parallel(workers, n int, f func(i int) error) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				for try := 0; try < 5; try++ {
					if err := f(i); err == nil || strings.Contains(err.Error(), "already exists") {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func status(c kubernetes.Interface) api.Status {
	var st api.Status
	cm, err := c.CoreV1().ConfigMaps(api.Namespace).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	if err == nil {
		_ = json.Unmarshal([]byte(cm.Data[api.StatusKey]), &st)
	}
	return st
}

func metric(url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func waitFor(b *testing.B, d time.Duration, cond func() bool, logs *testhost.SyncBuffer) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out; controller log tail:\n%s", tail(logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func freePort(b *testing.B) int {
	p, err := testhost.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	return p
}
