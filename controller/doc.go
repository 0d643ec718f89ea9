// Package controller is fleet-role's controller: it reads the cluster,
// asks the planner (swapplan) for the next action and carries it out.
// Its subpackage adapt turns Kubernetes objects into the planner's snapshot.
package controller
