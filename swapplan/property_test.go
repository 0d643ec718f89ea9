package swapplan_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
)

// TestPropertyRandomClustersAndEvents runs swaps on random clusters with
// random faults at random times and checks, on every plan, by the fleet
// model's quorum oracle (voting members only), that the planner never asks
// to remove a member unless the voters left that are up and healthy are a
// quorum, never asks a voter to stop unless the others up are a quorum (a
// frozen host up until it could be seen silent), never acts under a Lease
// someone else holds, never starts a second swap while one is under way,
// never clears the step-down or member-gone of a host that has not
// reported the finish of its demotion, and reaches an end within the sum
// of the bounds (plus the time the faults held it) that matches the result
// it reports (endStateMatches).
func TestPropertyRandomClustersAndEvents(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	results := map[string]int{}
	for seed := range seeds {
		res := runRandomSwap(t, uint64(seed))
		results[res]++
	}
	t.Logf("results over %d random swaps: %v", seeds, results)
	for _, r := range []string{api.ResultCompleted, api.ResultRolledBack, api.ResultAbandoned, "dead " + api.ResultCompleted} {
		if results[r] == 0 {
			t.Errorf("no random swap ended %s: the generator does not reach every end", r)
		}
	}
}

// event fires once at its time, or (with a step) when a plan first
// reaches that step.
type event struct {
	at   time.Time
	step string
	do   func(w *world)
}

func (e event) due(w *world) bool {
	if e.step != "" {
		return len(w.plans) > 0 && w.plans[len(w.plans)-1].Step == e.step
	}
	return !e.at.After(w.now)
}

func runRandomSwap(t *testing.T, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := newWorld(t, 3+rng.IntN(3), 1+rng.IntN(2), rng.IntN(3))
	w.rng = rng
	w.failRate = rng.Float64() * 0.3
	var voters, standbys []string
	for _, n := range w.nodes {
		switch n.Role {
		case api.RoleVoter:
			voters = append(voters, n.Name)
		case api.RoleStandby:
			standbys = append(standbys, n.Name)
		}
	}
	out := voters[rng.IntN(len(voters))]
	in := standbys[rng.IntN(len(standbys))]
	others := slices.DeleteFunc(slices.Clone(voters), func(v string) bool { return v == out })
	pick := func() string { return others[rng.IntN(len(others))] }
	minute := func(max int) time.Duration { return time.Duration(1+rng.IntN(max*60)) * time.Second }
	at := func(max int) time.Time { return epoch.Add(minute(max)) }

	var events []event
	var faultTime time.Duration
	steps := []string{api.StepSnapshot, api.StepDrainIn, api.StepPromote, api.StepJoin,
		api.StepStepDown, api.StepRemoveMember, api.StepMemberGone, api.StepUncordon, api.StepRollback}
	// transient faults start at a random time or at a random step, and heal.
	transient := func(max int, do func(w *world, until time.Time)) {
		d := minute(max)
		faultTime += d
		e := event{at: at(30), do: func(w *world) { do(w, w.now.Add(d)) }}
		if rng.IntN(2) == 0 {
			e.step = steps[rng.IntN(len(steps))]
		}
		events = append(events, e)
	}
	// One host at most is frozen: two of a small cluster's voters down
	// at once lose etcd its quorum whatever the planner does. One run in
	// five, the outgoing voter's host is frozen for good from the start:
	// the swap is a dead voter's, once it is dead by every sign.
	paused := rng.IntN(5) == 0
	dead := paused
	if dead {
		w.cfg.DeadAfter = 5 * time.Minute
		w.Hosts[out].Paused = true
	}
	for range rng.IntN(5) {
		switch rng.IntN(8) {
		case 0:
			// One voter unhealthy, or two at once: a removal then would
			// leave too few of the remaining members up.
			a, b := pick(), pick()
			transient(4, func(w *world, until time.Time) {
				w.Hosts[a].UnhealthyUntil = until
				if rng.IntN(2) == 0 {
					w.Hosts[b].UnhealthyUntil = until
				}
			})
		case 1:
			v := pick()
			transient(3, func(w *world, until time.Time) { w.Hosts[v].SilentUntil = until })
		case 2:
			transient(5, func(w *world, until time.Time) {
				if w.lease.Holder == "" || w.lease.Holder == api.ControllerHolder {
					w.lease = swapplan.Lease{Holder: "regrade", RenewTime: w.now, Duration: time.Hour}
					w.regradeUntil = until
				}
			})
		case 3:
			transient(4, func(w *world, until time.Time) {
				w.K3sPaused = true
				w.faults = append(w.faults, func(w *world) {
					if !w.now.Before(until) {
						w.K3sPaused = false
					}
				})
			})
		case 4:
			if paused {
				break
			}
			paused = true
			events = append(events, event{at: at(30), do: func(w *world) { w.Hosts[out].Paused = true }})
		case 7:
			if paused {
				break
			}
			paused = true
			// A remaining voter frozen: its Node stays Ready for the
			// node-monitor grace while its agent is silent.
			v := pick()
			transient(2, func(w *world, until time.Time) {
				w.Hosts[v].Paused = true
				w.faults = append(w.faults, func(w *world) {
					if !w.now.Before(until) {
						w.Hosts[v].Paused = false
					}
				})
			})
		case 5:
			if dead {
				// Note: a swap of another voter started before the dead
				// one is seen silent holds at every step once it is, as
				// it must (a voter silent), until an operator acts.
				break
			}
			v, s := pick(), in
			if len(standbys) > 1 {
				s = standbys[rng.IntN(len(standbys))]
			}
			events = append(events, event{at: at(20), do: func(w *world) { w.requestSwap(v, s) }})
		case 6:
			transient(3, func(w *world, until time.Time) {
				w.Hosts[in].HeartbeatStuck = true
				w.faults = append(w.faults, func(w *world) {
					if !w.now.Before(until) {
						w.Hosts[in].HeartbeatStuck = false
					}
				})
			})
		}
	}
	switch rng.IntN(11) {
	case 0:
		w.Hosts[in].RefusePromote = true
	case 1:
		w.Hosts[in].IgnorePromote = true
	case 2:
		w.Hosts[in].NeverJoin = true
	case 3:
		w.Hosts[others[0]].SnapshotNotReady = true
		w.Hosts[others[len(others)-1]].SnapshotNotReady = true
	case 4:
		w.node(in).Pods = append(w.node(in).Pods, swapplan.Pod{Namespace: "arc", Name: "runner-stuck", Runner: true})
	case 5:
		w.node(out).Pods = append(w.node(out).Pods, swapplan.Pod{Namespace: "arc", Name: "runner-stuck", Runner: true})
	case 6:
		w.Hosts[out].IgnoreStepDown = true
	case 7:
		// The candidate's apiserver never comes up: k3s cannot remove
		// its member, a voter's agent is asked, and may fail or not
		// answer; then an operator removes it some minutes after the
		// swap stopped stuck.
		w.Hosts[in].NeverReady = true
		switch rng.IntN(3) {
		case 0:
			w.Hosts[others[0]].RemoveFails = true
		case 1:
			w.Hosts[others[0]].RemoveIgnored = true
		}
		d := minute(10)
		faultTime += d
		events = append(events, event{step: api.StepStuck, do: func(w *world) {
			w.faults = append(w.faults, operatorRemoves(w.now.Add(d), in))
		}})
	case 8:
		w.Hosts[out].FailStepDowns = 1 + rng.IntN(2)
	}
	// A Node deleted mid-swap, the candidate's or the outgoing voter's,
	// at a random step: k3s removes its member (fleetmodel Delete), and
	// no action may be aimed at it once it is gone (apply fails on one).
	if rng.IntN(4) == 0 {
		gone := in
		if rng.IntN(2) == 0 {
			gone = out
		}
		events = append(events, event{step: steps[rng.IntN(len(steps))], do: func(w *world) { w.deleteNode(gone) }})
	}
	switch {
	case dead && rng.IntN(2) == 0:
		// Asked for by hand once it is dead.
		events = append(events, event{at: epoch.Add(10 * time.Minute), do: func(w *world) { w.requestSwap(out, in) }})
		fallthrough
	case dead:
		for _, s := range standbys {
			w.node(s).Verdict = api.Verdict{State: api.VerdictFit, Score: 5}
		}
		w.node(in).Verdict.Score = 1
	case rng.IntN(2) == 0:
		w.requestSwap(out, in)
	default:
		w.node(out).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 10}
		for _, s := range standbys {
			w.node(s).Verdict = api.Verdict{State: api.VerdictFit, Score: 5}
		}
		w.node(in).Verdict.Score = 1
	}
	w.faults = append(w.faults, func(w *world) {
		for len(events) > 0 {
			i := slices.IndexFunc(events, func(e event) bool { return e.due(w) })
			if i < 0 {
				return
			}
			e := events[i]
			events = slices.Delete(events, i, i+1)
			e.do(w)
		}
	})

	var swapID string
	var startedAt time.Time
	w.checks = append(w.checks, func(w *world, p swapplan.Plan) {
		desc := fmt.Sprintf("seed %d at %s: %s %s (%s)", seed, w.now.Sub(epoch), p.Action.Type, p.Action.Node, p.Reason)
		l := w.lease
		if l.Holder != "" && l.Holder != api.ControllerHolder && l.RenewTime.Add(l.Duration).After(w.now) {
			if p.Action.Type != api.ActionNone || p.RenewLease {
				t.Fatalf("acted under a Lease held by %s: %s", l.Holder, desc)
			}
		}
		if p.Action.Type == api.ActionStart {
			if swapID != "" && p.Swap.ID != swapID {
				t.Fatalf("started a second swap %s while %s is under way: %s", p.Swap.ID, swapID, desc)
			}
			if swapID == "" {
				swapID, startedAt = p.Swap.ID, w.now
			}
		}
		if p.Action.Type == api.ActionRemoveMember || p.Action.Type == api.ActionRemoveByVoter {
			gone := p.Action.Node
			if p.Action.Type == api.ActionRemoveByVoter {
				gone = in
				if p.Action.Node == in || p.Action.Node == out {
					t.Fatalf("asked %s's agent to remove the candidate's member: %s", p.Action.Node, desc)
				}
			}
			if p.Action.Type == api.ActionRemoveMember && p.Swap != nil && gone == p.Swap.Out {
				// The outgoing voter's removal: the members that vote
				// without it must be a majority of the members with it,
				// which counts it down, so that etcd can commit the
				// removal; a voter only slow votes. A paused voter counts
				// as up until the planner could have seen it silent (3
				// probe periods). The removal then never lowers the
				// failures etcd survives.
				if err := w.QuorumKept(fleetmodel.QuorumCheck{Now: w.now, Stopped: gone, Grace: 3 * w.cfg.ProbePeriod}); err != nil {
					t.Fatalf("asked to remove the member of %s: %v: %s", gone, err, desc)
				}
			} else if err := w.QuorumKept(fleetmodel.QuorumCheck{Now: w.now, Removed: gone, Healthy: true}); err != nil {
				// The candidate's, which runs: every voter left must be
				// up, now, and healthy: paused is down at once, as etcd
				// sees it.
				t.Fatalf("asked to remove the member of %s: %v: %s", gone, err, desc)
			}
		}
		if p.Action.Type == api.ActionStepDown {
			// A paused voter counts as up until the planner could have
			// seen it silent (3 probe periods).
			err := w.QuorumKept(fleetmodel.QuorumCheck{Now: w.now, Stopped: p.Action.Node, Grace: 3 * w.cfg.ProbePeriod})
			if err != nil {
				t.Fatalf("asked %s to step down: %v: %s", p.Action.Node, err, desc)
			}
		}
		if p.Action.Type == api.ActionEnd || p.Action.Type == api.ActionClearFinished {
			swap, cleared := p.Action.Swap, p.Action.Clear
			if p.Action.Type == api.ActionEnd {
				swap = p.Swap.ID
			} else {
				cleared = []string{p.Action.Node}
			}
			for _, name := range cleared {
				if n := w.find(name); n != nil && demoting(n, swap) && !finishedDemotion(n, swap) {
					t.Fatalf("%s clears the step-down or member-gone of %s, which has not reported the finish of its demotion: %s", p.Action.Type, name, desc)
				}
			}
		}
		if swapID != "" {
			budget := w.cfg.Bounds.Sum() + faultTime + 60*w.tick
			if w.now.Sub(startedAt) > budget {
				t.Fatalf("swap %s has not ended within %s (bounds %s + faults %s + 60 passes): %s",
					swapID, budget, w.cfg.Bounds.Sum(), faultTime, desc)
			}
		}
	})
	before := w.hostsNow()
	for range 2000 {
		w.pass()
		if swapID != "" && w.status.Last != nil && w.status.Last.ID == swapID && w.lease.Holder != api.ControllerHolder {
			if err := w.endStateMatches(*w.status.Last, before); err != nil {
				t.Fatalf("seed %d: swap %s ended %s (%s), but %v", seed, swapID, w.status.Last.Result, w.status.Last.Reason, err)
			}
			if w.status.Last.Dead {
				return "dead " + w.status.Last.Result
			}
			return w.status.Last.Result
		}
	}
	if swapID == "" {
		return "not started"
	}
	t.Fatalf("seed %d: swap %s did not end; last plan %+v", seed, swapID, w.plans[len(w.plans)-1])
	return ""
}

// demoting says the Node holds the swap's step-down or member-gone.
func demoting(n *swapplan.Node, swap string) bool {
	return n.MemberGone == swap || (n.Request != nil && n.Request.Swap == swap && n.Request.Action == api.RequestStepDown)
}

// finishedDemotion says the Node's report is the finish of its demotion
// from the swap.
func finishedDemotion(n *swapplan.Node, swap string) bool {
	r := n.Report
	return r != nil && r.Swap == swap && r.Action == api.ReportFinish && r.State == api.StateDone
}

// operatorRemoves removes the node's member at the time, as an operator
// typing the command a stuck swap gives.
func operatorRemoves(at time.Time, node string) func(w *world) {
	return func(w *world) {
		if !w.now.Before(at) {
			w.Members = slices.DeleteFunc(w.Members, func(m fleetmodel.Member) bool { return m.Node == node })
		}
	}
}

// hostState is what a swap may change on a host: its units, its role file
// and its member.
type hostState struct {
	Server, Agent bool
	RoleFile      string
	Member        string
	Learner       bool
}

// hostsNow is each host's state, by Node name.
func (w *world) hostsNow() map[string]hostState {
	out := map[string]hostState{}
	for name, h := range w.Hosts {
		st := hostState{Server: h.Server, Agent: h.Agent, RoleFile: h.RoleFile}
		if i := slices.IndexFunc(w.Members, func(m fleetmodel.Member) bool { return m.Node == name }); i >= 0 {
			st.Member, st.Learner = w.Members[i].Name, w.Members[i].Learner
		}
		out[name] = st
	}
	return out
}

// voterNodes are the Nodes of etcd's voting members, sorted.
func (w *world) voterNodes() []string {
	var out []string
	for _, m := range w.Members {
		if !m.Learner {
			out = append(out, m.Node)
		}
	}
	slices.Sort(out)
	return out
}

// endStateMatches says how the fleet's truth at a swap's end differs from
// the result the swap reports, given each host's state before it:
// completed, IN votes, OUT is no member, the fleet has as many voters as
// before, no Node is left cordoned by the swap but one it names pending,
// and the Lease is released; rolled back, the voters are those before
// (less any whose Node was deleted: k3s removed its member) and IN is no
// member; abandoned, no host changed (but the member of a deleted Node); pending, it names a host,
// each of which is gone, did not report the finish of its demotion, or is
// left cordoned by the swap. Note: a pending end releases the Lease too:
// what the swap did not finish stays on the host's Node (its step-down,
// member-gone or cordon) for its agent and clear-finished.
func (w *world) endStateMatches(r api.SwapResult, before map[string]hostState) error {
	var was []string
	for name, st := range before {
		if st.Member != "" && !st.Learner {
			was = append(was, name)
		}
	}
	slices.Sort(was)
	voters := w.voterNodes()
	switch r.Result {
	case api.ResultCompleted:
		if !slices.Contains(voters, r.In) {
			return fmt.Errorf("%s does not vote (voters %v)", r.In, voters)
		}
		if i := slices.IndexFunc(w.Members, func(m fleetmodel.Member) bool { return m.Node == r.Out }); i >= 0 {
			return fmt.Errorf("%s is still a member (%s)", r.Out, w.Members[i].Name)
		}
		if len(voters) != len(was) {
			return fmt.Errorf("%d voters %v, %d before %v", len(voters), voters, len(was), was)
		}
		for _, n := range w.nodes {
			if n.Unschedulable && n.CordonedBy == r.ID && !slices.Contains(r.Pending, n.Name) {
				return fmt.Errorf("%s is left cordoned by the swap", n.Name)
			}
		}
		if w.lease.Holder == api.ControllerHolder {
			return errors.New("the Lease is still held")
		}
	case api.ResultRolledBack:
		// Less the Nodes deleted meanwhile, whose members k3s removed,
		// and a dead voter whose member the swap removed: a removal is
		// not taken back.
		was = slices.DeleteFunc(was, func(name string) bool {
			return w.find(name) == nil || r.Dead && name == r.Out && !slices.Contains(voters, name)
		})
		if !slices.Equal(voters, was) {
			return fmt.Errorf("voters %v, before %v", voters, was)
		}
		if slices.ContainsFunc(w.Members, func(m fleetmodel.Member) bool { return m.Node == r.In }) {
			return fmt.Errorf("the candidate %s is still a member", r.In)
		}
	case api.ResultAbandoned:
		now := w.hostsNow()
		for name, st := range before {
			if w.find(name) == nil {
				// k3s removed the member of its deleted Node.
				st.Member, st.Learner = "", false
				before[name] = st
			}
			if r.Dead && name == r.Out && now[name].Member == "" {
				// The dead voter's member, removed before the candidate
				// refused: a removal is not taken back.
				st.Member, st.Learner = "", false
				before[name] = st
			}
		}
		if !maps.Equal(now, before) {
			return fmt.Errorf("hosts changed: %v, before %v", now, before)
		}
	case api.ResultPending:
		if len(r.Pending) == 0 {
			return errors.New("it names no pending host")
		}
		for _, name := range r.Pending {
			n := w.find(name)
			if n != nil && finishedDemotion(n, r.ID) && !(n.Unschedulable && n.CordonedBy == r.ID) {
				return fmt.Errorf("the pending host %s finished its demotion and is not left cordoned", name)
			}
		}
	default:
		return fmt.Errorf("no such result %q", r.Result)
	}
	return nil
}
