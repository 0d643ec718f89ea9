// Package cli holds the black-box tests of fleet-role's manners as a
// command line: the built binary run as a person runs it, against a real
// API server where the command reaches one: -n/--namespace and --context,
// the completion of node names and flag values, help, examples and
// argument errors. What the commands do to a swap is tested with the
// controller, in tests/controller.
package cli
