package helm

import (
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// ReleaseName is the release's name in every render.
const ReleaseName = "fleet-role"

// ChartDir is the chart's directory.
func ChartDir() string { return filepath.Join(testhost.Root(), "packaging", "helm", "fleet-role") }

// Tag is the image tag Render gives where the values name none: the
// chart of the repository has no appVersion and requires one.
const Tag = "0.0.0-test-1"

// Render renders the chart into namespace with values over its own, as
// helm template -n namespace does, with image.tag Tag where values name
// none: the manifests in Helm's install order, each after a "# Source:"
// line naming its template.
func Render(namespace string, values map[string]any) ([]byte, error) {
	merged := map[string]any{"image": map[string]any{"tag": Tag}}
	for k, v := range values {
		merged[k] = v
	}
	if img, ok := values["image"].(map[string]any); ok {
		with := map[string]any{"tag": Tag}
		for k, v := range img {
			with[k] = v
		}
		merged["image"] = with
	}
	return RenderChart("", namespace, merged)
}

// RenderChart renders the chart as Render does, with values as given
// and, where appVersion is not empty, that appVersion, as make chart
// packages it.
func RenderChart(appVersion, namespace string, values map[string]any) ([]byte, error) {
	ch, err := loader.Load(ChartDir())
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	if appVersion != "" {
		ch.Metadata.AppVersion = appVersion
	}
	opts := chartutil.ReleaseOptions{Name: ReleaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	// Helm's own sort: by kind, in the order an install creates them.
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sort the manifests: %w", err)
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("the chart has %d hooks, which a render does not apply", len(hooks))
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return []byte(b.String()), nil
}
