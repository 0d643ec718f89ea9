// Package load is the controller's load test: the built binary against a
// real kube-apiserver holding a fleet of thousands of Nodes and ten Pods
// each, with probes changing as agents write them, while the fleet
// simulator plays the swap's hosts. It reports the controller's memory,
// its start-up, and the time from an agent's report to the next action.
package load
