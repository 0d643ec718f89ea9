// Package plan holds the black-box tests of `fleet-role plan`: clusters
// written as Kubernetes Lists, the binary run on them, its answer read.
package plan
