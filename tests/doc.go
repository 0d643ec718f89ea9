// Package tests holds fleet-role's black-box suites: they run the built
// binary, or the real services it talks to, and look only at what a user
// sees. Unit tests sit beside the code they test.
package tests
