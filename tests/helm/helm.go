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
// line naming its template; no test hooks (as the Ansible role renders
// it, with helm template --no-hooks).
func Render(namespace string, values map[string]any) ([]byte, error) {
	r, err := RenderRelease(ReleaseName, "", namespace, WithTag(values))
	return r.Manifests, err
}

// WithTag is values with image.tag Tag where they name none.
func WithTag(values map[string]any) map[string]any {
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
	return merged
}

// RenderChart renders the chart as Render does, with values as given
// and, where appVersion is not empty, that appVersion, as make chart
// packages it.
func RenderChart(appVersion, namespace string, values map[string]any) ([]byte, error) {
	r, err := RenderRelease(ReleaseName, appVersion, namespace, values)
	return r.Manifests, err
}

// Release is a render of the chart as a release.
type Release struct {
	// Manifests are the objects an install creates, as Render gives them.
	Manifests []byte
	// Hooks are the hooks' objects (helm test's Pod), in the same form.
	Hooks []byte
	// Notes is NOTES.txt rendered, which helm install prints.
	Notes string
}

// RenderRelease renders the chart as the release name in namespace, with
// values as given (and schema-checked, as helm install does) and, where
// appVersion is not empty, that appVersion.
func RenderRelease(name, appVersion, namespace string, values map[string]any) (Release, error) {
	ch, err := loader.Load(ChartDir())
	if err != nil {
		return Release{}, fmt.Errorf("load the chart: %w", err)
	}
	if appVersion != "" {
		ch.Metadata.AppVersion = appVersion
	}
	opts := chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return Release{}, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return Release{}, fmt.Errorf("render the chart: %w", err)
	}
	var r Release
	// Note: NOTES.txt is no manifest; Helm's install takes it out before
	// it sorts them, as here.
	for k, v := range files {
		if strings.HasSuffix(k, "/NOTES.txt") {
			r.Notes = v
			delete(files, k)
		}
	}
	// Helm's own sort: by kind, in the order an install creates them.
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return Release{}, fmt.Errorf("sort the manifests: %w", err)
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	r.Manifests = []byte(b.String())
	b.Reset()
	for _, h := range hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, strings.TrimSpace(h.Manifest))
	}
	r.Hooks = []byte(b.String())
	return r, nil
}
