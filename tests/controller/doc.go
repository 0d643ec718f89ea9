// Package controller runs the controller against a real kube-apiserver
// and etcd, with a driver that plays the agents (their reports and probes)
// and k3s (EtcdIsVoter, removed-node-name, the server labels) and the
// kubelets (Leases, Ready, terminating Pods), over the API only.
package controller
