// Command demo runs fleet-role on a local simulated fleet (make demo):
// the fleet of tests/e2e — hosts as containers with systemd as PID 1 and
// the real fleet-role agent, three voters and a standby on the Docker
// platform, a real etcd member per server under the k3s double, a real
// kube-apiserver — and the built fleet-role controller with dry run off.
// It slows one voter's disk, shows the automatic swap step by step in
// `fleet-role status --watch`, reports the swap's total time and the
// controller's own share of it, and tears the fleet down.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/e2e"
)

// runner stands in for a test: the helpers' cleanups run on the way out,
// and a missing part ends the demo.
type runner struct {
	mu       sync.Mutex // the fleet starts its hosts on goroutines
	cleanups []func()
}

func (r *runner) Helper() {}
func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}
func (r *runner) Fatal(args ...any)         { r.exit(fmt.Sprint(args...)) }
func (r *runner) Skip(args ...any)          { r.exit(fmt.Sprint(args...)) }
func (r *runner) Fatalf(f string, a ...any) { r.exit(fmt.Sprintf(f, a...)) }
func (r *runner) Logf(f string, a ...any)   { fmt.Fprintf(os.Stderr, "demo: "+f+"\n", a...) }

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

	began := time.Now()
	f := e2e.Start(r, e2e.Options{
		Hosts: []e2e.HostSpec{
			{Name: "v1", Role: swapplan.RoleVoter},
			{Name: "v2", Role: swapplan.RoleVoter},
			{Name: "v3", Role: swapplan.RoleVoter},
			{Name: "s1", Role: swapplan.RoleStandby, Docker: true},
		},
		Controller: "\n[verdicts]\nwindow = 5\n",
		Log:        func(format string, args ...any) { say(format, args...) },
	})
	say("the fleet is up in %s; starting fleet-role controller with dry run on, as it is deployed", time.Since(began).Round(time.Second))
	f.StartDryRunController()
	cli := func(args ...string) string {
		out, stderr, code := f.CLI(args...)
		if code != 0 {
			r.Fatalf("fleet-role %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	say("waiting for every host to be fit on a full window of probe samples")
	f.WaitFit(2 * time.Minute)
	say("restarting fleet-role controller with dry run off (what ansible-playbook ... -e dry_run=false does)")
	f.StopController()
	f.StartController()
	say("fleet-role status")
	fmt.Print(cli("status"))

	say("v2's disk turns slow (25 writes a second); fleet-role status --watch follows what comes")
	f.Hosts["v2"].SlowDisk(25)
	watch := exec.Command(f.Bin, "status", "--watch", "--kubeconfig", f.API.Kubeconfig)
	watch.Stdout, watch.Stderr = os.Stdout, os.Stderr
	if err := watch.Start(); err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	sum0, count0 := reaction(f.Metrics())
	wait(r, 6*time.Minute, func() bool { st := f.Status(); return st.Swap == nil && st.Last != nil })
	sum1, count1 := reaction(f.Metrics())
	share, actions := sum1-sum0, count1-count0
	time.Sleep(time.Second)
	_ = watch.Process.Kill()
	_ = watch.Wait()

	res := f.Status().Last
	total := res.EndedAt.Sub(res.StartedAt)
	say("the swap ended %s: %s out, %s in (%s)", res.Result, res.Out, res.In, res.Origin)
	fmt.Print(cli("status"))
	if res.Out != "v2" {
		r.Fatalf("the swap took %s out, not v2, whose disk was slowed: see its verdict above", res.Out)
	}
	say("the swap took %s; the controller's own share, from each change that woke it to the action it led to,\n=== summed over its %d actions: %s (%.1f%%)",
		total.Round(time.Millisecond), actions, share.Round(time.Millisecond), 100*share.Seconds()/total.Seconds())
	say("tearing the fleet down")
}

// reaction reads fleet_role_reaction_seconds's sum and count from /metrics.
func reaction(metrics string) (sum time.Duration, count int) {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, "fleet_role_reaction_seconds_sum "); ok {
			s, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			sum = time.Duration(s * float64(time.Second))
		}
		if v, ok := strings.CutPrefix(line, "fleet_role_reaction_seconds_count "); ok {
			count, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return sum, count
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
