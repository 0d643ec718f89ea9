// Package helm renders fleet-role's chart (packaging/helm/fleet-role) with
// Helm's own library, as helm template does, as any release, and tests the
// render against a real kube-apiserver: the objects decode strictly and
// apply, two releases side by side, the Pods (helm test's too) meet the
// restricted Pod Security profile, the controller runs under its
// ServiceAccount, and the operator and viewer roles allow what the CLI
// does. The values are checked by the chart's schema and helm lint
// --strict; the configuration rendered from each example values file by
// fleet-role config validate. It writes packaging/kubernetes/controller.yaml,
// the render the Ansible role fleet_role_controller applies, and the
// chart's README.md, generated from values.yaml's comments, and checks
// both are fresh.
package helm

//go:generate go test . -run TestTheChartsREADMEIsGeneratedFromValuesYAMLsComments -update
