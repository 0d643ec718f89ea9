// Package role is the host agent's pure decisions: when its etcd member is
// gone, what to do from the controller's request, the role file, k3s's
// tombstone and the units' states, and which server a demoted host's agent
// joins. It speaks the wire contract through api (the request kinds, the
// report states, the role file's words) and otherwise imports the standard
// library only; it does no I/O: the daemon gathers the facts and carries
// out the steps.
package role

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// MemberGone says this host's etcd member is gone: k3s left its tombstone,
// or the Node's removed-node-name names this host's member (it may name an
// older one, which does not count), or the controller's member-gone
// annotation names the current swap.
func MemberGone(tombstone bool, member, removedNodeName, memberGoneSwap, currentSwap string) bool {
	switch {
	case tombstone:
		return true
	case member != "" && removedNodeName == member:
		return true
	case currentSwap != "" && memberGoneSwap == currentSwap:
		return true
	}
	return false
}

// InventoryServer is a server of the inventory.
type InventoryServer struct {
	Name    string
	Address string
}

// ErrNoServer: the inventory names no server other than this host.
var ErrNoServer = errors.New("no other server in the inventory to join")

// ErrNoLiveServer: none of the voters named is a server of the inventory.
var ErrNoLiveServer = errors.New("no voter named is a server of the inventory")

// ErrNoPort: the port given is no TCP port.
var ErrNoPort = errors.New("not a port")

// ServerJoinURL is the server a promoted host's k3s server joins through
// (its `server:`): the first other server of the inventory that is one of
// the live voters, at port (Facts.ServerPort). Unlike AgentServerURL it
// never falls back to a server that may no longer be one: k3s's server
// fails to start when its `server:` does not answer, and a server with no
// `server:` and an empty datastore starts a cluster of its own.
func ServerJoinURL(inventory []InventoryServer, self string, voters []string, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("the servers' port %d: %w", port, ErrNoPort)
	}
	for _, s := range inventory {
		if s.Name != self && slices.Contains(voters, s.Name) {
			return url(s.Address, port), nil
		}
	}
	return "", fmt.Errorf("%w: voters %v", ErrNoLiveServer, voters)
}

// AgentServerURL is the server a demoted host's agent joins: the first
// other server of the inventory that is a current voter, else the first
// other server of the inventory, at port (Facts.ServerPort). A host never
// joins itself, so the bootstrap host joins another server too.
func AgentServerURL(inventory []InventoryServer, self string, voters []string, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("the servers' port %d: %w", port, ErrNoPort)
	}
	var first *InventoryServer
	for i := range inventory {
		s := &inventory[i]
		if s.Name == self {
			continue
		}
		if slices.Contains(voters, s.Name) {
			return url(s.Address, port), nil
		}
		if first == nil {
			first = s
		}
	}
	if first == nil {
		return "", ErrNoServer
	}
	return url(first.Address, port), nil
}

// url is a server's URL: k3s's supervisor, which a joining server's
// bootstrap and an agent dial, listens on the server's
// https-listen-port (k3s-io/k3s pkg/cli/server/server.go, run:
// SupervisorPort is HTTPSPort; pkg/agent/proxy/apiproxy.go,
// NewSupervisorProxy, takes the URL's port as the supervisor's).
func url(address string, port int) string {
	if strings.Contains(address, ":") {
		address = "[" + address + "]" // IPv6
	}
	return "https://" + address + ":" + strconv.Itoa(port)
}

// same says both are the one request: the same swap, action and time.
func same(r, o *api.Request) bool {
	return r != nil && o != nil && r.Swap == o.Swap && r.Action == o.Action && r.At.Equal(o.At)
}

// Unit is the state of a k3s unit.
type Unit struct {
	Active    bool
	StartedAt time.Time
	// Enabled: the unit starts at boot (k3s's installer enables the unit
	// it installs).
	Enabled bool
}

// Facts are what the agent knows of its host at one look.
type Facts struct {
	// Role is the role file's; RoleMissing when there is none, RoleErr
	// when it is corrupt.
	Role        api.HostRole
	RoleMissing bool
	RoleErr     error
	// Request is the controller's latest request, Handled the last one
	// carried out.
	Request *api.Request
	Handled *api.Request
	// Tombstone: k3s's server/db/etcd/tombstone exists. Datastore:
	// server/db/etcd exists. Member: server/db/etcd/name.
	Tombstone bool
	Datastore bool
	Member    string
	// RemovedNodeName and MemberGoneSwap are the Node's annotations.
	RemovedNodeName string
	MemberGoneSwap  string
	Server, Agent   Unit
	// Staged: the host is staged to become a server.
	Staged bool
	// Finished is the swap whose finished demotion was last reported.
	Finished string
	// KnowsVoters: the agent knows live voters other than this host, to
	// derive the server its k3s server joins through.
	KnowsVoters bool
	// NodeRead: the agent's watch has listed its Node since it started,
	// so Request is the controller's latest request (none when there is
	// none, or no Node yet).
	NodeRead bool
	// ServerPort is the port of every server URL the agent writes for
	// this host's k3s to join through: the https-listen-port of this
	// host's k3s configuration (k3s's 6443 when it sets none), which the
	// fleet's servers share. 0 when that configuration cannot be read;
	// K3sConfigErr says why, and nothing that needs a server URL is done.
	ServerPort   int
	K3sConfigErr error
	// Unlisted: the voters' member list, asked while this host's server
	// does not run, lists neither this host's member (Member) nor a member
	// at its peer URL, and the cluster listed that member before: it was
	// removed. The agent asks only for a host whose role file says server
	// and whose datastore names a member.
	Unlisted bool
}

// Removed says this host's member was removed behind the back of a server
// that does not run: the voters no longer list it. Not while the host is
// asked to promote: a candidate's member is the controller's to judge (a
// rollback tells the host with member-gone), and k3s adds a member again
// that it lost before its server ever started.
func (f Facts) Removed() bool {
	if !f.Unlisted || f.Role != api.HostServer || f.Server.Active {
		return false
	}
	return f.Request == nil || f.Request.Action != api.RequestPromote
}

// CurrentSwap is the swap the controller's latest request belongs to.
func (f Facts) CurrentSwap() string {
	switch {
	case f.Request != nil:
		return f.Request.Swap
	case f.Handled != nil:
		return f.Handled.Swap
	}
	return ""
}

// Step is one thing the daemon does on the host, in order. The steps are
// the agent's own, named in its log and its reports' messages; they are
// not the swap's steps (api.Step*), which the controller publishes.
type Step string

// The steps.
const (
	WriteServerRole Step = "write-role-server"
	WriteAgentRole  Step = "write-role-agent"
	StopAgent       Step = "stop-agent"
	StartServer     Step = "start-server"
	MoveLeader      Step = "move-leader"
	StopServer      Step = "stop-server"
	MoveDatastore   Step = "move-datastore"
	StartAgent      Step = "start-agent"
	WriteJoin       Step = "write-join"
	TakeSnapshot    Step = "snapshot"
	// RemoveMember removes the member the request names through the local
	// etcd: never this host's own, never when the voters left would not
	// be a quorum; one already gone counts as removed.
	RemoveMember Step = "remove-member"
)

// What a decision carries out when it answers no request and finishes no
// demotion (Decision.Do).
const (
	DoNone  = "none"
	DoServe = "serve" // the role file says server
	DoWait  = "wait"  // the role file says agent, the member is not gone
	DoAgent = "agent" // the role file says agent, no datastore
)

// Report is the report a decision makes once its steps are done
// (api.StateDone), or at once (api.StateRefused, api.StateFailed): the
// request's action, or api.ReportFinish. The daemon adds the start of the
// unit the steps left running, and what a snapshot made, and writes it as
// an api.Report.
type Report struct {
	Swap    string
	Action  string
	State   string
	Message string
	// Answers is the request answered; nil for a finish.
	Answers *api.Request
}

// Decision is what to do on the host now.
type Decision struct {
	// Do is the request's action (api.RequestPromote, ...) for a decision
	// that answers one, api.ReportFinish for a demotion's finish, else
	// DoNone, DoServe, DoWait or DoAgent.
	Do     string
	Steps  []Step
	Report *Report
	Why    string
}

// Decide decides from the facts. It is idempotent: the steps it returns
// for a host where they are done are ones that change nothing.
func Decide(f Facts) Decision {
	if f.RoleErr != nil {
		d := Decision{Do: DoNone, Why: fmt.Sprintf("%v: nothing is done until it is mended", f.RoleErr)}
		if q := f.Request; q != nil && !same(q, f.Handled) {
			state := api.StateFailed
			if q.Action == api.RequestPromote {
				state = api.StateRefused
			}
			d.Report = &Report{Swap: q.Swap, Action: q.Action, State: state, Message: f.RoleErr.Error(), Answers: q}
		}
		return d
	}
	if q := f.Request; q != nil && !same(q, f.Handled) {
		return decideRequest(f, q)
	}
	gone := MemberGone(f.Tombstone, f.Member, f.RemovedNodeName, f.MemberGoneSwap, f.CurrentSwap()) || f.Removed()
	switch {
	// Note: a server whose member is gone finishes a demotion too: its
	// agent missed the step-down (stopped, or its host down, while a
	// rollback went on without it), and k3s, started again, would fail
	// against the cluster that removed it, or join it as a new member;
	// one that cannot reach its peers at all would be started again and
	// again, for ever.
	case f.Tombstone || f.Role == api.HostAgent || gone:
		return decideAgent(f, gone)
	case f.Role == api.HostServer:
		return decideServer(f)
	}
	return Decision{Do: DoNone, Why: "there is no role file: nothing is done until one is written"}
}

func decideRequest(f Facts, q *api.Request) Decision {
	answer := func(state, msg string) *Report {
		return &Report{Swap: q.Swap, Action: q.Action, State: state, Message: msg, Answers: q}
	}
	switch q.Action {
	case api.RequestPromote:
		if !f.Staged && !f.Server.Active {
			return Decision{Do: api.RequestPromote, Report: answer(api.StateRefused, "this host is not staged as a standby"),
				Why: "refusing the promotion: this host is not staged as a standby; nothing is changed"}
		}
		if !f.Server.Active && f.K3sConfigErr != nil {
			// Note: refused before the agent unit stops: the server's join
			// needs the servers' port, and a host left with neither unit
			// running would be a promotion half done.
			return Decision{Do: api.RequestPromote, Report: answer(api.StateRefused, f.K3sConfigErr.Error()),
				Why: "refusing the promotion: " + f.K3sConfigErr.Error() + "; nothing is changed"}
		}
		// Note: the role file is written first, so that an agent stopped
		// midway keeps the server it started, rather than reading "agent"
		// and stopping it again.
		steps := []Step{}
		if f.Role != api.HostServer {
			steps = append(steps, WriteServerRole)
		}
		steps = append(steps, StopAgent)
		if !f.Server.Active {
			steps = append(steps, WriteJoin)
		}
		steps = append(steps, StartServer)
		return Decision{Do: api.RequestPromote, Steps: steps, Report: answer(api.StateDone, ""),
			Why: "promoting: the agent unit stops, the server's join through a live voter is written, the server unit starts"}
	case api.RequestStepDown:
		steps := []Step{}
		if f.Role != api.HostAgent {
			steps = append(steps, WriteAgentRole)
		}
		if f.Server.Active {
			steps = append(steps, MoveLeader)
		}
		steps = append(steps, StopServer)
		return Decision{Do: api.RequestStepDown, Steps: steps, Report: answer(api.StateDone, ""), Why: "stepping down: leadership moved away, the server unit stops"}
	case api.RequestSnapshot:
		if !f.Server.Active {
			return Decision{Do: api.RequestSnapshot, Report: answer(api.StateFailed, "no server runs on this host"), Why: "no snapshot: no server runs here"}
		}
		return Decision{Do: api.RequestSnapshot, Steps: []Step{TakeSnapshot}, Report: answer(api.StateDone, ""), Why: "taking an etcd snapshot"}
	case api.RequestRemoveMember:
		member := q.Member
		if member == "" {
			member = q.MemberID
		}
		switch {
		case !f.Server.Active || f.Role != api.HostServer:
			return Decision{Do: api.RequestRemoveMember, Report: answer(api.StateFailed, "no server runs on this host, or it is stepping down: it removes no member"),
				Why: "not removing the member " + member + ": no server runs here"}
		case q.Member != "" && q.Member == f.Member:
			return Decision{Do: api.RequestRemoveMember, Report: answer(api.StateFailed, "the member named is this host's own: a host never removes its own"),
				Why: "not removing the member " + member + ": it is this host's own"}
		}
		return Decision{Do: api.RequestRemoveMember, Steps: []Step{RemoveMember}, Report: answer(api.StateDone, ""),
			Why: "removing the member " + member + " with this host's etcd client"}
	}
	return Decision{Do: DoNone, Why: fmt.Sprintf("ignoring a request to %q, which this agent does not know", q.Action)}
}

// decideAgent: the role file says agent, or k3s left its tombstone.
func decideAgent(f Facts, gone bool) Decision {
	swap := f.CurrentSwap()
	switch {
	case f.Datastore && gone:
		steps := []Step{}
		if f.Role != api.HostAgent {
			steps = append(steps, WriteAgentRole)
		}
		steps = append(steps, StopServer, MoveDatastore, StartAgent)
		return Decision{Do: api.ReportFinish, Steps: steps, Report: finishReport(f, swap),
			Why: "finishing the demotion: the member is gone; the server stops, its datastore is moved aside, the agent starts"}
	case f.Datastore:
		if f.Server.Active && !f.steppedDown(swap) {
			return Decision{Do: DoWait, Why: "the role file says agent, but this host's server runs with its member in etcd: " +
				"a server is stopped only by a swap's step-down, which the controller asks once the other voters keep a quorum without it " +
				"(fleet-role swap); nothing is done until then, or until its member is gone"}
		}
		if f.Server.Active {
			return Decision{Do: DoWait, Steps: []Step{MoveLeader, StopServer},
				Why: "the role file says agent: the server stops, and the agent waits for its member to be gone"}
		}
		if f.Server.Enabled {
			return Decision{Do: DoWait, Steps: []Step{StopServer},
				Why: "the role file says agent: the server is kept from starting at boot, and the agent waits for its member to be gone"}
		}
		return Decision{Do: DoWait, Why: "the role file says agent: waiting for this host's member to be gone"}
	}
	// Note: a unit stopped but enabled (as k3s's installer leaves it) is
	// stopped again, which keeps it from starting at boot: a demoted host
	// that reboots must not start its server and join as a new member.
	var steps []Step
	if f.Role != api.HostAgent {
		steps = append(steps, WriteAgentRole)
	}
	if f.Server.Active || f.Server.Enabled {
		steps = append(steps, StopServer)
	}
	if !f.Agent.Active || !f.Agent.Enabled {
		steps = append(steps, StartAgent)
	}
	d := Decision{Do: DoAgent, Steps: steps, Why: "the role file says agent and no datastore is left: the agent runs"}
	if f.demoted(swap) {
		d.Report = finishReport(f, swap)
	}
	return d
}

// steppedDown says this agent carried out the step-down of the swap.
func (f Facts) steppedDown(swap string) bool {
	return swap != "" && f.Handled != nil && f.Handled.Swap == swap && f.Handled.Action == api.RequestStepDown
}

// demoted says the swap demoted this host and its finish is not reported.
func (f Facts) demoted(swap string) bool {
	if swap == "" || f.Finished == swap {
		return false
	}
	return f.MemberGoneSwap == swap || f.steppedDown(swap)
}

func finishReport(f Facts, swap string) *Report {
	if swap == "" || f.Finished == swap {
		return nil
	}
	return &Report{Swap: swap, Action: api.ReportFinish, State: api.StateDone}
}

func decideServer(f Facts) Decision {
	if !f.Staged && !f.Datastore && !f.Server.Active {
		return Decision{Do: DoNone, Why: "the role file says server, but this host is not staged to become one: nothing is done"}
	}
	if !f.Server.Active && !f.Datastore && !f.NodeRead {
		// Note: a server with no datastore joins a live voter, which the
		// swap's promote request names. An agent stopped midway through
		// a promotion, once started again, reads its role file before its
		// Node; the voters it knew from before may since have been
		// demoted.
		return Decision{Do: DoNone, Why: "the role file says server and the server has no datastore yet: waiting to read this host's Node, whose request names the voters to join through"}
	}
	if !f.Server.Active && !f.Datastore && f.KnowsVoters && f.K3sConfigErr != nil {
		return Decision{Do: DoNone, Why: "the role file says server, but its join cannot be written: " + f.K3sConfigErr.Error() +
			": nothing is done until it is mended"}
	}
	var steps []Step
	if f.Agent.Active || f.Agent.Enabled {
		steps = append(steps, StopAgent)
	}
	if !f.Server.Active {
		// Note: with no datastore, k3s's server joins through its
		// `server:`; it is written anew from the live voters the agent
		// knows, never left naming a host that may have been demoted.
		if !f.Datastore && f.KnowsVoters {
			steps = append(steps, WriteJoin)
		}
		steps = append(steps, StartServer)
	} else if !f.Server.Enabled {
		steps = append(steps, StartServer) // a start makes it start at boot
	}
	return Decision{Do: DoServe, Steps: steps, Why: "the role file says server: the server runs"}
}
