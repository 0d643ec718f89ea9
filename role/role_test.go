package role

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
)

func TestMemberGone(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		tombstone                         bool
		member, removed, memberGone, swap string
		want                              bool
	}{
		{"the tombstone says so", true, "", "", "", "", true},
		{"removed-node-name naming this host's member says so", false, "h-0a1b2c3d", "h-0a1b2c3d", "", "", true},
		{"removed-node-name naming an older member does not", false, "h-0a1b2c3d", "h-99999999", "", "", false},
		{"member-gone naming the current swap says so", false, "h-0a1b2c3d", "h-99999999", "s2", "s2", true},
		{"member-gone naming another swap does not", false, "h-0a1b2c3d", "", "s1", "s2", false},
		{"nothing says so", false, "h-0a1b2c3d", "", "", "s2", false},
		{"an empty member and an empty removed-node-name are no match", false, "", "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, MemberGone(tc.tombstone, tc.member, tc.removed, tc.memberGone, tc.swap))
		})
	}
}

func TestAgentServerURL(t *testing.T) {
	inv := []InventoryServer{{"h1", "10.0.0.1"}, {"h2", "10.0.0.2"}, {"h3", "10.0.0.3"}, {"h4", "fd00::4"}}
	for _, tc := range []struct {
		name   string
		self   string
		voters []string
		port   int
		want   string
	}{
		{"the first other server that is a current voter", "h1", []string{"h3", "h2"}, 6443, "https://10.0.0.2:6443"},
		{"a server that is no voter is passed over", "h1", []string{"h3"}, 6443, "https://10.0.0.3:6443"},
		{"with no voter known, the first other server", "h2", nil, 6443, "https://10.0.0.1:6443"},
		{"the bootstrap host joins another server, never itself", "h1", []string{"h1"}, 6443, "https://10.0.0.2:6443"},
		{"an IPv6 address is bracketed", "h1", []string{"h4"}, 6443, "https://[fd00::4]:6443"},
		{"the port is the servers' port given", "h1", []string{"h2"}, 7443, "https://10.0.0.2:7443"},
		{"an IPv6 address at the servers' port given", "h1", []string{"h4"}, 7443, "https://[fd00::4]:7443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AgentServerURL(inv, tc.self, tc.voters, tc.port)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := AgentServerURL([]InventoryServer{{"h1", "10.0.0.1"}}, "h1", nil, 6443)
	assert.ErrorIs(t, err, ErrNoServer)
	for _, port := range []int{0, -1, 65536} {
		_, err := AgentServerURL(inv, "h1", []string{"h2"}, port)
		assert.ErrorIs(t, err, ErrNoPort, "port %d", port)
	}
	for _, port := range []int{1, 65535} {
		_, err := AgentServerURL(inv, "h1", []string{"h2"}, port)
		assert.NoError(t, err, "port %d, the first and last", port)
	}
}

func TestServerJoinURL(t *testing.T) {
	inv := []InventoryServer{{"h1", "10.0.0.1"}, {"h2", "10.0.0.2"}, {"h3", "10.0.0.3"}, {"h4", "fd00::4"}}
	got, err := ServerJoinURL(inv, "h1", []string{"h3", "h2"}, 6443)
	require.NoError(t, err)
	assert.Equal(t, "https://10.0.0.2:6443", got, "the first other server of the inventory that is a live voter")
	got, err = ServerJoinURL(inv, "h1", []string{"h1", "h3"}, 6443)
	require.NoError(t, err)
	assert.Equal(t, "https://10.0.0.3:6443", got, "the bootstrap host promoted again joins a live voter, never itself")
	got, err = ServerJoinURL(inv, "h1", []string{"h3"}, 7443)
	require.NoError(t, err)
	assert.Equal(t, "https://10.0.0.3:7443", got, "at the servers' port given")
	got, err = ServerJoinURL(inv, "h1", []string{"h4"}, 7443)
	require.NoError(t, err)
	assert.Equal(t, "https://[fd00::4]:7443", got, "an IPv6 address bracketed, at the servers' port given")
	for _, voters := range [][]string{nil, {"h1"}, {"h9"}} {
		_, err := ServerJoinURL(inv, "h1", voters, 6443)
		assert.ErrorIs(t, err, ErrNoLiveServer, "no fallback to a server that may no longer be one: %v", voters)
	}
	for _, port := range []int{0, -1, 65536} {
		_, err := ServerJoinURL(inv, "h1", []string{"h2"}, port)
		assert.ErrorIs(t, err, ErrNoPort, "port %d", port)
	}
	for _, port := range []int{1, 65535} {
		_, err := ServerJoinURL(inv, "h1", []string{"h2"}, port)
		assert.NoError(t, err, "port %d, the first and last", port)
	}
}

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var errK3sConfig = errors.New("k3s's configuration /etc/rancher/k3s/config.yaml: https-listen-port \"seven\" is not a port")

func req(action string) *api.Request { return &api.Request{Swap: "s1", Action: action, At: at} }

// removal is a remove-member request naming the member of the candidate c1.
func removal() *api.Request {
	return &api.Request{Swap: "s1", Action: api.RequestRemoveMember, At: at, Member: "c1-0a1b2c3d", MemberID: "8e9e05c52164694d"}
}

func TestDecide(t *testing.T) {
	running := Unit{Active: true, Enabled: true, StartedAt: at.Add(-time.Hour)}
	enabled := Unit{Enabled: true}
	for _, tc := range []struct {
		name   string
		facts  Facts
		do     string
		steps  []Step
		report *Report
	}{
		{"a promotion of a staged standby writes the role first, then its join through a live voter, then swaps the units",
			Facts{Role: api.HostAgent, Agent: running, Staged: true, Request: req(api.RequestPromote)},
			api.RequestPromote, []Step{WriteServerRole, StopAgent, WriteJoin, StartServer},
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateDone, Answers: req(api.RequestPromote)}},
		{"a promotion of a host that is not staged is refused and changes nothing",
			Facts{Role: api.HostAgent, Agent: running, Request: req(api.RequestPromote)},
			api.RequestPromote, nil,
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateRefused, Message: "this host is not staged as a standby", Answers: req(api.RequestPromote)}},
		{"a promotion is refused and changes nothing while k3s's configuration, which gives the servers' port, cannot be read",
			Facts{Role: api.HostAgent, Agent: running, Staged: true, Request: req(api.RequestPromote), K3sConfigErr: errK3sConfig},
			api.RequestPromote, nil,
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateRefused, Message: errK3sConfig.Error(), Answers: req(api.RequestPromote)}},
		{"a promotion of a running server goes on while k3s's configuration cannot be read: it writes no join",
			Facts{Role: api.HostServer, Server: running, Staged: true, Datastore: true, Request: req(api.RequestPromote), K3sConfigErr: errK3sConfig},
			api.RequestPromote, []Step{StopAgent, StartServer},
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateDone, Answers: req(api.RequestPromote)}},
		{"a host rebooted mid-promotion starts no server while its join cannot be written",
			Facts{Role: api.HostServer, Staged: true, KnowsVoters: true, NodeRead: true, K3sConfigErr: errK3sConfig},
			DoNone, nil, nil},
		{"a server rebooted with its datastore starts while k3s's configuration cannot be read: it needs no join",
			Facts{Role: api.HostServer, Staged: true, Datastore: true, KnowsVoters: true, NodeRead: true, K3sConfigErr: errK3sConfig},
			DoServe, []Step{StartServer}, nil},
		{"a promotion asked again of a running server starts nothing new",
			Facts{Role: api.HostServer, Server: running, Request: req(api.RequestPromote)},
			api.RequestPromote, []Step{StopAgent, StartServer},
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateDone, Answers: req(api.RequestPromote)}},
		{"a step-down writes the role, moves leadership away and stops the server",
			Facts{Role: api.HostServer, Server: running, Datastore: true, Request: req(api.RequestStepDown)},
			api.RequestStepDown, []Step{WriteAgentRole, MoveLeader, StopServer},
			&Report{Swap: "s1", Action: api.RequestStepDown, State: api.StateDone, Answers: req(api.RequestStepDown)}},
		{"a snapshot is taken where a server runs",
			Facts{Role: api.HostServer, Server: running, Request: req(api.RequestSnapshot)},
			api.RequestSnapshot, []Step{TakeSnapshot},
			&Report{Swap: "s1", Action: api.RequestSnapshot, State: api.StateDone, Answers: req(api.RequestSnapshot)}},
		{"a snapshot fails where no server runs",
			Facts{Role: api.HostAgent, Request: req(api.RequestSnapshot)},
			api.RequestSnapshot, nil,
			&Report{Swap: "s1", Action: api.RequestSnapshot, State: api.StateFailed, Message: "no server runs on this host", Answers: req(api.RequestSnapshot)}},
		{"a voter asked to remove another host's member removes it through its etcd client",
			Facts{Role: api.HostServer, Server: running, Datastore: true, Member: "v2-11111111", Request: removal()},
			api.RequestRemoveMember, []Step{RemoveMember},
			&Report{Swap: "s1", Action: api.RequestRemoveMember, State: api.StateDone, Answers: removal()}},
		{"a host asked to remove its own member fails the request and removes nothing",
			Facts{Role: api.HostServer, Server: running, Datastore: true, Member: "c1-0a1b2c3d", Request: removal()},
			api.RequestRemoveMember, nil,
			&Report{Swap: "s1", Action: api.RequestRemoveMember, State: api.StateFailed, Message: "the member named is this host's own: a host never removes its own", Answers: removal()}},
		{"a host where no server runs fails a removal",
			Facts{Role: api.HostAgent, Agent: running, Request: removal()},
			api.RequestRemoveMember, nil,
			&Report{Swap: "s1", Action: api.RequestRemoveMember, State: api.StateFailed, Message: "no server runs on this host, or it is stepping down: it removes no member", Answers: removal()}},
		{"a server whose role file says agent fails a removal",
			Facts{Role: api.HostAgent, Server: running, Datastore: true, Request: removal()},
			api.RequestRemoveMember, nil,
			&Report{Swap: "s1", Action: api.RequestRemoveMember, State: api.StateFailed, Message: "no server runs on this host, or it is stepping down: it removes no member", Answers: removal()}},
		{"a removal handled is not carried out again",
			Facts{Role: api.HostServer, Server: running, Datastore: true, Request: removal(), Handled: removal()},
			DoServe, nil, nil},
		{"a handled request is not carried out again",
			Facts{Role: api.HostServer, Server: running, Request: req(api.RequestSnapshot), Handled: req(api.RequestSnapshot)},
			DoServe, nil, nil},
		{"a corrupt role file is not acted on, and a promotion is refused",
			Facts{RoleErr: api.ErrCorruptRoleFile, Agent: running, Staged: true, Request: req(api.RequestPromote)},
			DoNone, nil,
			&Report{Swap: "s1", Action: api.RequestPromote, State: api.StateRefused, Message: api.ErrCorruptRoleFile.Error(), Answers: req(api.RequestPromote)}},
		{"a corrupt role file is not acted on, tombstone or not",
			Facts{RoleErr: api.ErrCorruptRoleFile, Tombstone: true, Datastore: true, Server: running},
			DoNone, nil, nil},
		{"the tombstone finishes a server whose role file still says server",
			Facts{Role: api.HostServer, Tombstone: true, Datastore: true, Server: running, Handled: req(api.RequestStepDown)},
			api.ReportFinish, []Step{WriteAgentRole, StopServer, MoveDatastore, StartAgent},
			&Report{Swap: "s1", Action: api.ReportFinish, State: api.StateDone}},
		{"member-gone naming the swap finishes a demotion whose removed-node-name names another member",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", RemovedNodeName: "h-99999999", MemberGoneSwap: "s1", Handled: req(api.RequestStepDown)},
			api.ReportFinish, []Step{StopServer, MoveDatastore, StartAgent},
			&Report{Swap: "s1", Action: api.ReportFinish, State: api.StateDone}},
		{"a candidate that missed its rollback's step-down finishes the demotion once told its member is gone",
			Facts{Role: api.HostServer, Datastore: true, Member: "c1-0a1b2c3d", Server: enabled, MemberGoneSwap: "s1", Handled: req(api.RequestPromote)},
			api.ReportFinish, []Step{WriteAgentRole, StopServer, MoveDatastore, StartAgent},
			&Report{Swap: "s1", Action: api.ReportFinish, State: api.StateDone}},
		{"a server whose member k3s was asked to remove, and that missed its step-down, finishes the demotion",
			Facts{Role: api.HostServer, Datastore: true, Member: "h-0a1b2c3d", RemovedNodeName: "h-0a1b2c3d", Server: running},
			api.ReportFinish, []Step{WriteAgentRole, StopServer, MoveDatastore, StartAgent}, nil},
		{"a candidate told its member is gone before its server made a datastore runs the agent",
			Facts{Role: api.HostServer, MemberGoneSwap: "s1", Handled: req(api.RequestPromote), Server: enabled},
			DoAgent, []Step{WriteAgentRole, StopServer, StartAgent},
			&Report{Swap: "s1", Action: api.ReportFinish, State: api.StateDone}},
		{"a member-gone of an earlier swap does not demote a server",
			Facts{Role: api.HostServer, Datastore: true, Member: "h-0a1b2c3d", Server: running, MemberGoneSwap: "s0", Handled: req(api.RequestPromote)},
			DoServe, nil, nil},
		{"a stepped-down host waits while its member is not gone",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", Handled: req(api.RequestStepDown)},
			DoWait, nil, nil},
		{"a server the role file says is an agent, with no step-down, is left running: the role file alone stops no voter",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", Server: running},
			DoWait, nil, nil},
		{"a server the role file says is an agent, after its step-down, is stopped (started again meanwhile)",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", Server: running, Handled: req(api.RequestStepDown)},
			DoWait, []Step{MoveLeader, StopServer}, nil},
		{"a server the role file says is an agent, whose last request handled was a promotion, is left running",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", Server: running, Handled: req(api.RequestPromote)},
			DoWait, nil, nil},
		{"an agent restarted after the datastore moved starts the agent and reports the finish once",
			Facts{Role: api.HostAgent, Handled: req(api.RequestStepDown)},
			DoAgent, []Step{StartAgent},
			&Report{Swap: "s1", Action: api.ReportFinish, State: api.StateDone}},
		{"a finish already reported is not reported again",
			Facts{Role: api.HostAgent, Agent: running, Handled: req(api.RequestStepDown), Finished: "s1"},
			DoAgent, nil, nil},
		{"a stepped-down host whose server is stopped but enabled keeps it from starting at boot while it waits",
			Facts{Role: api.HostAgent, Datastore: true, Member: "h-0a1b2c3d", Server: enabled, Handled: req(api.RequestStepDown)},
			DoWait, []Step{StopServer}, nil},
		{"an agent host whose server the installer left enabled keeps it from starting at boot",
			Facts{Role: api.HostAgent, Agent: running, Server: enabled},
			DoAgent, []Step{StopServer}, nil},
		{"an agent running but not enabled is started, which makes it start at boot",
			Facts{Role: api.HostAgent, Agent: Unit{Active: true, StartedAt: at}},
			DoAgent, []Step{StartAgent}, nil},
		{"a server running but not enabled is started, which makes it start at boot",
			Facts{Role: api.HostServer, Server: Unit{Active: true, StartedAt: at}, Datastore: true},
			DoServe, []Step{StartServer}, nil},
		{"a plain agent host keeps its agent running and reports nothing",
			Facts{Role: api.HostAgent, Agent: running},
			DoAgent, nil, nil},
		{"a role file edited to server swaps the units on a staged host",
			Facts{Role: api.HostServer, Agent: running, Staged: true, NodeRead: true},
			DoServe, []Step{StopAgent, StartServer}, nil},
		{"a host rebooted mid-promotion writes its join anew from the voters it knows before its server starts",
			Facts{Role: api.HostServer, Staged: true, KnowsVoters: true, NodeRead: true},
			DoServe, []Step{WriteJoin, StartServer}, nil},
		{"an agent started again midway through a promotion reads its Node before its server joins",
			Facts{Role: api.HostServer, Agent: running, Staged: true, KnowsVoters: true},
			DoNone, nil, nil},
		{"a server with a datastore restarts its member without a new join",
			Facts{Role: api.HostServer, Staged: true, Datastore: true, KnowsVoters: true},
			DoServe, []Step{StartServer}, nil},
		{"a role file edited to server does nothing on a host that is not staged",
			Facts{Role: api.HostServer, Agent: running},
			DoNone, nil, nil},
		{"an agent that refused a promotion reports no finish of its swap",
			Facts{Role: api.HostAgent, Agent: running, Handled: req(api.RequestPromote)},
			DoAgent, nil, nil},
		{"a tombstone with no swap known finishes the demotion and reports no finish, an earlier swap's finish reported or not",
			Facts{Role: api.HostServer, Tombstone: true, Datastore: true, Server: running, Finished: "s0"},
			api.ReportFinish, []Step{WriteAgentRole, StopServer, MoveDatastore, StartAgent}, nil},
		{"a server host whose agent is stopped but enabled keeps it from starting at boot",
			Facts{Role: api.HostServer, Server: running, Datastore: true, Agent: enabled},
			DoServe, []Step{StopAgent}, nil},
		{"without a role file nothing is done",
			Facts{RoleMissing: true, Agent: running},
			DoNone, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.facts)
			assert.Equal(t, tc.do, d.Do, d.Why)
			assert.Equal(t, tc.steps, d.Steps, d.Why)
			assert.Equal(t, tc.report, d.Report, d.Why)
			assert.NotEmpty(t, d.Why)
		})
	}
}

func TestAServerThatDoesNotRunFinishesAsAnAgentByEachWayOfKnowingItsMemberIsGone(t *testing.T) {
	swap := "20261130-113000-v1"
	stepDown := &api.Request{Swap: swap, Action: api.RequestStepDown, At: time.Date(2026, 11, 30, 11, 50, 0, 0, time.UTC)}
	promote := &api.Request{Swap: swap, Action: api.RequestPromote, At: time.Date(2026, 11, 30, 11, 40, 0, 0, time.UTC)}
	// A promoted host whose server cannot start: the role file says
	// server, its datastore names its member, the server unit stopped.
	base := func() Facts {
		return Facts{Role: api.HostServer, Datastore: true, Member: "h-0a1b2c3d", Staged: true, NodeRead: true, KnowsVoters: true,
			Handled: promote}
	}
	finish := []Step{WriteAgentRole, StopServer, MoveDatastore, StartAgent}
	for _, tc := range []struct {
		name   string
		change func(*Facts)
		want   []Step
		report bool
	}{
		{"nothing says so: the server is started again", func(*Facts) {}, []Step{StartServer}, false},
		{"k3s's tombstone", func(f *Facts) { f.Tombstone = true }, finish, true},
		{"k3s's removed-node-name naming its member", func(f *Facts) { f.RemovedNodeName = "h-0a1b2c3d" }, finish, true},
		{"the controller's member-gone naming the swap, its step-down kept on the Node", func(f *Facts) {
			f.Request, f.Handled, f.MemberGoneSwap = stepDown, stepDown, swap
		}, finish, true},
		{"the voters' member list, with no request on the Node", func(f *Facts) { f.Unlisted, f.Handled = true, nil }, finish, false},
		{"the voters' member list, a step-down on the Node", func(f *Facts) { f.Unlisted, f.Request, f.Handled = true, stepDown, stepDown }, finish, true},
		{"not the voters' member list while the Node asks a promotion: k3s adds the member again", func(f *Facts) {
			f.Unlisted, f.Request = true, promote
		}, []Step{StartServer}, false},
		{"not the voters' member list while the server runs", func(f *Facts) {
			f.Unlisted, f.Handled = true, nil
			f.Server = Unit{Active: true, Enabled: true, StartedAt: time.Now()}
		}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.change(&f)
			d := Decide(f)
			assert.Equal(t, tc.want, d.Steps, d.Why)
			if tc.report {
				require.NotNil(t, d.Report, "the finish is reported to the swap")
				assert.Equal(t, api.ReportFinish, d.Report.Action)
				assert.Equal(t, swap, d.Report.Swap)
			} else {
				assert.Nil(t, d.Report)
			}
		})
	}
}

func TestARemovalNamingTheMemberByItsIDAloneNamesTheIDInItsDecision(t *testing.T) {
	q := &api.Request{Swap: "s1", Action: api.RequestRemoveMember, At: at, MemberID: "8e9e05c52164694d"}
	running := Unit{Active: true, Enabled: true, StartedAt: at.Add(-time.Hour)}
	d := Decide(Facts{Role: api.HostServer, Server: running, Datastore: true, Member: "v2-11111111", Request: q})
	assert.Equal(t, []Step{RemoveMember}, d.Steps, d.Why)
	assert.Equal(t, "removing the member 8e9e05c52164694d with this host's etcd client", d.Why)
}
