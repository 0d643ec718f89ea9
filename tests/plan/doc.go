// Package plan holds the black-box tests of `fleet-role plan`: clusters
// written as Kubernetes Lists, the binary run on them, its answer read.
// They test what only the binary shows: the List read, the configuration
// it plans with, its output, its errors and exit codes, and the examples
// of docs/examples; the planner's decisions are swapplan's tests'.
package plan
