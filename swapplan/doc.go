// Package swapplan is the heart of fleet-role: a pure function from what the
// controller reads off the cluster (a Snapshot, with Now inside) to the one
// next action of a voter swap (a Plan, with its reason).
//
// A swap takes an unfit etcd voter (OUT) out of a k3s cluster and a fit
// standby (IN) in, without ever losing quorum: snapshot, cordon and drain
// IN, promote it, wait for it to vote, hold at the gates until the N+1
// voters agree on the membership, cordon and drain OUT, step it down, ask
// k3s to remove its member, let its agent finish the demotion, clean up,
// uncordon and end. A swap that cannot go on is rolled back or abandoned.
// A swap that ends before a host it asked to step down reported the
// finish of its demotion leaves that instruction on the host's Node, for
// its agent; once the finish is reported, with no swap under way, the
// planner clears it.
//
// Because the step is read from the snapshot alone (the Nodes, the agents'
// reports, the Lease and the status the controller published) and never
// from memory, a restarted controller resumes where the swap is, and an
// operator replays a cluster offline with `fleet-role plan` to ask why a
// swap waits. The package imports the standard library and api (the wire
// contract: the names on the cluster, the steps and the JSON it reads and
// writes) only, reads no clock, and never depends on map order.
package swapplan
