// Command demo runs fleet-role on a local simulated fleet (make demo):
// the fleet of tests/e2e deployed as its users deploy it — hosts as
// containers, two voters with systemd as PID 1, a voter and a standby
// with a Docker engine of their own, k3s played by the k3s double over a
// real etcd member per server, a real kube-apiserver — onto which
// `ansible-playbook ansible/deploy.yml` installs fleet-role's .deb and
// applies the controller, whose Deployment runs as containers (e2e.Deploy),
// first with dry run on, then, once the playbook runs again with
// -e dry_run=false, off. Where no Docker engine answers, the hosts are
// played by tests/fleetsim instead, against the same real
// kube-apiserver, and the controller runs in this process. It slows one
// voter's disk, shows the automatic swap step by step in `fleet-role
// status --watch`, reports the swap's total time and the controller's own
// share of it, and tears the fleet down.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/tests/e2e"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
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

// fleet is what the demo needs of a fleet, whether its hosts are
// containers or simulated.
type fleet struct {
	bin, kubeconfig string
	client          kubernetes.Interface
	// hosts are the fleet's hosts.
	hosts []e2e.HostSpec
	// dryRunOff turns the controller's dry run off.
	dryRunOff func()
	metrics   func() string
	// slow makes v2's disk slow.
	slow func()
}

func main() {
	r := &runner{}
	defer r.done()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; r.exit("interrupted") }()

	began := time.Now()
	var f fleet
	if err := testhost.DockerAnswers(); err != nil {
		say("no Docker engine answers (%v): the hosts are simulated in this process instead", err)
		f = simulated(r)
	} else {
		f = containers(r)
	}
	say("the fleet is up in %s; fleet-role controller runs with dry run on, as it is deployed", time.Since(began).Round(time.Second))
	status := func() api.Status { return e2e.ReadStatus(f.client) }
	cli := func(args ...string) string {
		cmd := exec.Command(f.bin, append(args, "--kubeconfig", f.kubeconfig)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			r.Fatalf("fleet-role %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	say("waiting for every host to be fit on a full window of probe samples")
	wait(r, 3*time.Minute, func() bool { return e2e.Unfit(status(), f.hosts) == nil })
	say("fleet-role status")
	fmt.Print(cli("status"))

	say("v2's disk turns slow; fleet-role status --watch follows what comes")
	f.slow()
	watch := exec.Command(f.bin, "status", "--watch", "--kubeconfig", f.kubeconfig)
	watch.Stdout, watch.Stderr = os.Stdout, os.Stderr
	if err := watch.Start(); err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	wait(r, 3*time.Minute, func() bool { st := status(); return st.Decision != nil && st.Decision.Out == "v2" })
	say("in the dry run the decision is only reported: %s", status().Reason)
	f.dryRunOff()
	sum0, count0 := reaction(f.metrics())
	wait(r, 6*time.Minute, func() bool { st := status(); return st.Swap == nil && st.Last != nil })
	sum1, count1 := reaction(f.metrics())
	share, actions := sum1-sum0, count1-count0
	time.Sleep(time.Second)
	_ = watch.Process.Kill()
	_ = watch.Wait()

	res := status().Last
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

// containers deploys the fleet of tests/e2e with the playbook: each host
// a container with systemd as PID 1 running the real agent from
// fleet-role's .deb, a real etcd member per server, the controller from
// its Deployment.
func containers(r *runner) fleet {
	opts := e2e.Options{
		Hosts:         e2e.DeployedHosts,
		VerdictWindow: 5,
		// k3s's etcd timing: 5 s election timeout, 500 ms heartbeat.
		ElectionTimeout: e2e.K3sElectionTimeout,
		Log:             func(format string, args ...any) { say(format, args...) },
	}
	// On the real k3s binary where make setup found one (FLEET_ROLE_K3S),
	// its fleet of native hosts; else on the k3s double.
	deploy := e2e.Deploy
	if os.Getenv(testhost.K3sEnv) != "" {
		opts.Hosts, deploy = e2e.RealK3sHosts, e2e.DeployOnK3s
	}
	d := deploy(r, opts)
	return fleet{
		bin: d.Bin, kubeconfig: d.Kubeconfig, client: d.Client, hosts: opts.Hosts,
		dryRunOff: func() {
			say("ansible-playbook deploy.yml -e dry_run=false: the configuration's checksum rolls the controller's Deployment")
			_, changed := d.Playbook("-e", "dry_run=false")
			reps := d.WaitRolledOut(3 * time.Minute)
			var pods []string
			for _, rep := range reps {
				pods = append(pods, rep.Pod)
			}
			say("%d tasks changed; the controller's replicas are now %s", changed, strings.Join(pods, " and "))
			// The leader's metrics are read once it leads.
			wait(r, time.Minute, func() bool { return d.Metrics() != "" })
		},
		metrics: d.Metrics,
		slow: func() {
			say("v2's disk throttled to 10 writes a second")
			d.Hosts["v2"].SlowDisk(10)
		},
	}
}

// simulated runs the fleet where there is no Docker engine: the real
// kube-apiserver and etcd as local processes, and in this process the
// hosts as tests/fleetsim plays them (their Nodes, kubelets' Leases,
// probes and agents' answers; etcd's membership is simulated, not run)
// and the controller.
func simulated(r *runner) fleet {
	dir, err := os.MkdirTemp("", "fleet-role-demo-")
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { os.RemoveAll(dir) })
	say("building fleet-role")
	bin, err := testhost.BuildFleetRole(dir)
	if err != nil {
		r.Fatal(err)
	}
	say("starting a real kube-apiserver and etcd")
	server := kubeapi.Start(r)
	klog.SetLogger(logr.Discard()) // the controller's client-go, in this process
	say("simulating the hosts v1, v2, v3 (voters) and s1 (standby)")
	d := fleetsim.New(r, server.Client, probePeriod, 3, 1, 0)
	r.Cleanup(d.Close)

	var ctrl *controller.Controller
	var stop func()
	start := func(dryRun bool) {
		say("starting fleet-role controller with dry run %s", map[bool]string{true: "on", false: "off"}[dryRun])
		cfg := config.DefaultController()
		cfg.DryRun = dryRun
		cfg.Period, cfg.ProbePeriod, cfg.MinPassInterval = time.Second, probePeriod, 50*time.Millisecond
		cfg.Verdicts.Window = 5
		cfg.ListenAddress = "" // its metrics are read in this process
		cfg.LeaderElection = config.LeaderElection{Lease: "fleet-role-controller", LeaseDuration: 4 * time.Second,
			RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
		client, err := kubernetes.NewForConfig(server.Config)
		if err != nil {
			r.Fatal(err)
		}
		c, err := controller.New(controller.Options{Config: cfg, Client: client, Identity: "demo", Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			r.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		ctrl, stop = c, func() { cancel(); <-done }
	}
	r.Cleanup(func() {
		if stop != nil {
			stop()
		}
	})
	start(true)
	hosts := []e2e.HostSpec{{Name: "v1", Role: api.RoleVoter}, {Name: "v2", Role: api.RoleVoter},
		{Name: "v3", Role: api.RoleVoter}, {Name: "s1", Role: api.RoleStandby}}
	return fleet{
		bin: bin, kubeconfig: server.Kubeconfig, client: server.Client, hosts: hosts,
		dryRunOff: func() {
			say("restarting fleet-role controller with dry run off (what ansible-playbook ... -e dry_run=false does)")
			stop()
			start(false)
		},
		metrics: func() string {
			rec := httptest.NewRecorder()
			ctrl.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			return rec.Body.String()
		},
		slow: func() {
			say("v2's probe made to measure an fsync p99 of 40 ms")
			d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 40 })
		},
	}
}

// probePeriod is the simulated hosts' and the controller's.
const probePeriod = 2 * time.Second

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
