// Package ansible tests the Ansible roles (make test-ansible): yamllint,
// ansible-lint and a syntax check; the agent role into a temporary prefix
// and onto a host with systemd as PID 1; the controller role against the
// real kube-apiserver; the rendered manifests decoded strictly; the .deb
// installed on a systemd host; and undeploy.yml leaving nothing of
// fleet-role's on a host or the cluster, and k3s running.
package ansible
