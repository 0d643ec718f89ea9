// Package docs checks the documentation against the repository: every
// relative link of README.md and docs/ leads to a file that exists (and to
// a heading of it, when the link names one), and the list of which
// package imports which in docs/architecture.md is what go list says now.
package docs
