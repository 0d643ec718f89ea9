// Command demo runs fleet-role on a local simulated fleet (make demo): a
// real kube-apiserver and etcd, a fleet of k3s hosts played over the API
// by tests/fleetsim, and the built fleet-role controller. It asks for a
// manual swap with `fleet-role swap`, follows it with `fleet-role status`
// to its end, then slows a voter's disk and shows the automatic decision
// a dry run only reports.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// runner stands in for a test: the helpers' cleanups run on the way out,
// and a missing part ends the demo.
type runner struct{ cleanups []func() }

func (r *runner) Helper()                   {}
func (r *runner) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *runner) Fatal(args ...any)         { r.exit(fmt.Sprint(args...)) }
func (r *runner) Skip(args ...any)          { r.exit(fmt.Sprint(args...)) }
func (r *runner) Fatalf(f string, a ...any) { r.exit(fmt.Sprintf(f, a...)) }

func (r *runner) done() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}

func (r *runner) exit(msg string) {
	fmt.Fprintln(os.Stderr, "demo:", msg)
	r.done()
	os.Exit(1)
}

func say(format string, args ...any) { fmt.Printf("\n=== "+format+"\n", args...) }

func main() {
	r := &runner{}
	defer r.done()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; r.exit("interrupted") }()

	dir, err := os.MkdirTemp("", "fleet-role-demo")
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { os.RemoveAll(dir) })
	say("building fleet-role")
	bin, err := testhost.BuildFleetRole(dir)
	if err != nil {
		r.Fatal(err)
	}
	say("starting a real kube-apiserver and etcd (from make test-bins)")
	api := kubeapi.Start(r)
	say("starting a simulated fleet: voters v1 v2 v3, standbys s1 s2, agents a1 a2 (tests/fleetsim plays their agents, k3s and kubelets)")
	sim := fleetsim.New(r, api.Client, 2*time.Second, 3, 2, 2)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Fatal(err)
	}
	metrics := "http://" + l.Addr().String()
	l.Close()
	conf := filepath.Join(dir, "controller.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`version = 1
dry_run = true
period = "2s"
probe_period = "2s"
listen_address = %q
[verdicts]
window = 5
`, strings.TrimPrefix(metrics, "http://"))), 0o600); err != nil {
		r.Fatal(err)
	}
	say("starting fleet-role controller (dry run on)")
	logFile, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		r.Fatal(err)
	}
	ctrl := exec.Command(bin, "controller", "--config", conf, "--kubeconfig", api.Kubeconfig)
	ctrl.Stdout, ctrl.Stderr = logFile, logFile
	ctrl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctrl.Start(); err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { _ = ctrl.Process.Signal(syscall.SIGTERM); _ = ctrl.Wait() })
	wait(r, 30*time.Second, func() bool {
		resp, err := http.Get(metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	status := func() swapplan.Status {
		var st swapplan.Status
		cm, err := api.Client.CoreV1().ConfigMaps(swapplan.Namespace).Get(context.Background(), swapplan.StatusConfigMap, metav1.GetOptions{})
		if err == nil {
			_ = json.Unmarshal([]byte(cm.Data[swapplan.StatusKey]), &st)
		}
		return st
	}
	cli := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--kubeconfig", api.Kubeconfig)...).CombinedOutput()
		if err != nil {
			r.Fatalf("fleet-role %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	wait(r, 30*time.Second, func() bool { return len(status().Voters) == 3 })

	say("fleet-role status")
	fmt.Print(cli("status"))
	say("fleet-role swap v1 s1")
	fmt.Print(cli("swap", "v1", "s1"))
	say("following the swap, step by step")
	last := ""
	wait(r, 3*time.Minute, func() bool {
		st := status()
		if st.Step != last && st.Step != "" {
			last = st.Step
			fmt.Printf("%s  %-14s %s\n", time.Now().Format("15:04:05"), st.Step, st.Reason)
		}
		return st.Swap == nil && st.Last != nil
	})
	res := status().Last
	say("the swap ended %s: %s out, %s in", res.Result, res.Out, res.In)
	fmt.Print(cli("status"))

	say("v2's disk turns slow (fsync p99 40 ms): its verdict over a window of 5 samples, and the decision\n=== the cooldown after the last swap and the dry run hold")
	sim.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 40 })
	wait(r, time.Minute, func() bool { return status().Decision != nil })
	fmt.Print(cli("status"))
	say("with dry_run = false the controller carries that out (its log: %s, removed on exit)", logFile.Name())
}

func wait(r *runner, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			r.Fatalf("gave up after %s", d)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
