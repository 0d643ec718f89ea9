package alerts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var dashboardFile = filepath.Join("..", "..", "packaging", "helm", "fleet-role", "files", "grafana-dashboard.json")

// controllerMetrics reads the names of the series the controller serves
// from controller/metrics.go: each metric's name, and a histogram's
// _bucket, _sum and _count.
func controllerMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "controller", "metrics.go"))
	require.NoError(t, err)
	return metricsDeclared(t, src)
}

// everyMetric are the metrics every file of the controller declares (the
// holds', the notifier's) and the agent's, which the rules may select.
func everyMetric(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "controller", "*.go"))
	require.NoError(t, err)
	files = append(files, filepath.Join("..", "..", "daemon", "metrics.go"))
	var src []byte
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			src = append(src, b...)
		}
	}
	names := metricsDeclared(t, src)
	return names
}

// metricsDeclared are the names of the metrics src makes.
func metricsDeclared(t *testing.T, src []byte) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`prometheus\.New(\w+)\(prometheus\.\w+Opts\{Name: "(\w+)"`).FindAllStringSubmatch(string(src), -1) {
		names[m[2]] = true
		if m[1] == "Histogram" || m[1] == "HistogramVec" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[m[2]+suffix] = true
			}
		}
	}
	require.Contains(t, names, "fleet_role_pass_seconds_bucket", "metrics.go no longer reads as expected")
	return names
}

// metricNames parses expr and returns the metric names it selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	require.NoError(t, err, expr)
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// grafanaVariables are the Grafana variables the dashboard's queries use,
// with a value that makes them PromQL.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$__interval", "1m")

// agentMetric says the metric is one of the agents' (or Prometheus's up
// of their scrape), which the agents' panels show.
func agentMetric(name string) bool {
	return strings.HasPrefix(name, "fleet_role_agent_") || name == "up"
}

func TestEveryDashboardQueryParsesAndNamesOnlyTheControllersMetrics(t *testing.T) {
	src, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dashboard struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(src, &dashboard))
	assert.NotEmpty(t, dashboard.UID)
	require.NotEmpty(t, dashboard.Panels)

	known, declared := controllerMetrics(t), everyMetric(t)
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range dashboard.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			names := metricNames(t, grafanaVariables.Replace(target.Expr))
			assert.NotEmpty(t, names, "%s: %s", p.Title, target.Expr)
			for _, n := range names {
				if agentMetric(n) {
					continue // the agents' panels: tests/helm checks them against daemon/metrics.go
				}
				assert.True(t, declared[n], "%s: %s is no metric of the controller", p.Title, n)
				used[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}
	for n := range known {
		if !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") {
			assert.True(t, used[n], "no panel shows %s", n)
		}
	}
}
