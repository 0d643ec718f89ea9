// Package rbac proves fleet-role's RBAC least privilege on a real
// kube-apiserver: it applies the controller's RBAC as shipped (the Helm
// chart's render, with the optional holds that grant more) and each
// agent's (packaging/kubernetes/agent-rbac.yaml.j2, rendered for a host as
// the Ansible role renders it), then asks the API server, by
// SubjectAccessReview as each ServiceAccount, that every request the code
// makes is allowed and that a list of requests it must not make is
// refused, one agent's on another's Node among them. It also scans every
// rule shipped for a wildcard.
package rbac
