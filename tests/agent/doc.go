// Package agent runs the built `fleet-role agent` binary against the real
// parts: a real kube-apiserver, the real Docker engine driving k3s
// stand-in containers, and a notify socket standing in for systemd's.
package agent
