// Package alerts tests the Prometheus alerting rules the Helm chart ships
// (packaging/helm/fleet-role/files/prometheus-rules.yaml) with Prometheus's
// own rule machinery, as promtool's rule tests do: series loaded in the
// promqltest syntax, the rule file loaded by a rules.Manager, its groups
// evaluated step by step, and the firing alerts compared at chosen times.
// It also checks the Grafana dashboard's queries name only the
// controller's metrics.
package alerts
