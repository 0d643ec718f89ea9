// Package helm renders fleet-role's chart (packaging/helm/fleet-role) with
// Helm's own library, as helm template does, and tests the render against
// a real kube-apiserver: the objects decode strictly and apply, the Pods
// meet the restricted Pod Security profile, the controller runs under its
// ServiceAccount, and the operator and viewer roles allow what the CLI
// does. It writes packaging/kubernetes/controller.yaml, the render the
// Ansible role fleet_role_controller applies, and checks it is fresh.
package helm

//go:generate go test . -run TestTheChartsREADMEIsGeneratedFromValuesYAMLsComments -update
