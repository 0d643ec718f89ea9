// Package logkey names the fields of fleet-role's log records, the one
// vocabulary of the agent, the controller and the binary.
//
// A log record is an event: its message is a fixed string that names the
// kind of event ("report written", "action taken"), and every value is a
// field (a log/slog attribute) whose key is one of these constants, so
// that `node=v2`, `swap=...` or `err=...` mean the same thing, spelled the
// same way, in the agent's journal and in the controller's log, and a
// query on a field finds every record that carries it. A value is never
// formatted into the message; a human-readable why (the planner's
// reason, the agent decision's) is the field Reason.
//
// The test of this package parses the agent, the controller, the
// platforms and the binary and fails on a log call whose message is not
// a constant, or whose key is not one of these constants.
package logkey

// The fields both the agent and the controller use.
const (
	// Component is the process's part that logs: "agent", "controller",
	// "config" (the controller's configuration watch), "client-go".
	Component = "component"
	// Node is the Node, and host, the record is about: for the agent its
	// own, for the controller the Node of the action.
	Node = "node"
	// Swap is the ID of the swap under way.
	Swap = "swap"
	// Action is what is carried out: for the controller the planner's
	// action (cordon-in, request-promote, ...), for the agent the request
	// or report it answers (promote, step-down, finish, ...).
	Action = "action"
	// Err is the error.
	Err = "err"
	// Reason is the human-readable why: the planner's Reason, the agent
	// decision's Why.
	Reason = "reason"
	// Took is how long the event took.
	Took = "took"
	// State is a report's state: done, failed.
	State = "state"
	// RetryIn is how long until the next try.
	RetryIn = "retry_in"
	// Attempt counts the tries of one thing so far.
	Attempt = "attempt"
	// File is the path of a file the agent wrote or read.
	File = "file"
	// Server is the URL of the k3s server a host joins, or the address of
	// the apiserver the agent reached.
	Server = "server"
	// Servers are the apiservers the agent knows.
	Servers = "servers"
	// Listed are the apiservers the kubernetes EndpointSlice lists.
	Listed = "listed"
	// Leaving are the apiservers of the voters a swap takes out.
	Leaving = "leaving"
)

// The controller's fields.
const (
	// Step is the swap's step (the planner's Plan.Step).
	Step = "step"
	// Kind is the kind of a failure, as the failures metric counts it.
	Kind = "kind"
	// Reaction is the time from the change that woke a pass to its action.
	Reaction = "reaction"
	// Identity is this replica's name in the leader election.
	Identity = "identity"
	// In and Out are the swap's candidate and the voter it replaces.
	In  = "in"
	Out = "out"
	// Config is the path of the controller's configuration file.
	Config = "config"
	// Resync is how often the configuration file is read when it cannot
	// be watched.
	Resync = "resync"
	// Version, Commit, DryRun and Namespace describe the controller as it
	// starts.
	Version   = "version"
	Commit    = "commit"
	DryRun    = "dry_run"
	Namespace = "namespace"
)

// The agent's fields.
const (
	// Part is the agent's part that logs: "reporter", "token".
	Part = "part"
	// Platform is the agent's platform: systemd, docker.
	Platform = "platform"
	// Steps are the steps of the agent's decision, in order.
	Steps = "steps"
	// Event is the reason of a warning Event the agent records on its
	// Node (BadRequest, CorruptRoleFile), and Message its message.
	Event   = "event"
	Message = "message"
	// To is where a thing moved: the member etcd leadership went to, the
	// directory a datastore was moved to.
	To = "to"
	// Member and MemberID name an etcd member; WasListed says whether the
	// member removed was still in the member list.
	Member    = "member"
	MemberID  = "member_id"
	WasListed = "was_listed"
	// Removed are the snapshots pruned, Keep how many are kept.
	Removed = "removed"
	Keep    = "keep"
	// ServiceAccount, Expires and RenewAt describe a renewed token.
	ServiceAccount = "service_account"
	Expires        = "expires"
	RenewAt        = "renew_at"
	// Runner is an actions-runner-controller EphemeralRunner,
	// namespace/name.
	Runner = "runner"
)
