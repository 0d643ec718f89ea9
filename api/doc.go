// Package api is fleet-role's wire contract: every name fleet-role writes
// to or reads from a cluster or a host (annotations, labels, conditions,
// Leases, the status ConfigMap and its keys, namespaces, Events, files on a
// host) and the JSON its parts exchange through them (the controller's
// requests and status, the agents' reports and probe samples, the swap
// record on the Lease, the manual request, the role file and the agent's
// state file). Each name's doc comment says who writes it and who reads it.
//
// The controller, the agent and the commands of one release meet those of
// another during an upgrade, and a cluster keeps what an older release
// wrote. So the JSON documents carry their format's version, V ("v"): a
// writer writes Version, a reader takes a missing version as version 1
// (the format before the field existed) and ignores the fields it does not
// know. A later version only adds fields; a field whose meaning changes
// takes a new name. The golden files under testdata pin what users'
// clusters hold, and testdata/v1 what releases before the version field
// wrote.
//
// The package imports the standard library only and nothing of fleet-role,
// so that every part can speak the contract without importing the planner.
package api
