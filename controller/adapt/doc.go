// Package adapt turns Kubernetes objects (Nodes, Leases, Pods and the
// status ConfigMap) into the planner's Snapshot, and reads them from the
// List that `kubectl get nodes,leases,configmaps,pods -A -o json` prints.
//
// Each object is converted on its own (Node, Pod, Lease, Status), so the
// controller converts an object once per change and not once per pass. A
// malformed fleet-role.io annotation is an error naming the object, the
// annotation and the field; Build still returns a snapshot in which that
// annotation is absent, so a controller can go on while `fleet-role plan`
// refuses the input.
package adapt
