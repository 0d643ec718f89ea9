// Package daemon is the host agent, `fleet-role agent`: it watches the role
// file and k3s's datastore with fsnotify, its own Node through client-go,
// and resyncs everything on a period, which is the source of truth; on each
// look it gathers the facts, asks role.Decide what to do, carries the steps
// out through a platform, and reports on its Node, retrying until the report
// is written and keeping it on disk until then. No business rule lives in
// the loop: role decides, platform acts.
package daemon
