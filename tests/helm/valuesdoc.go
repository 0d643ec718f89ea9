package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// ValuesREADMEPath is the chart's README.md, which ValuesREADME writes.
func ValuesREADMEPath() string { return filepath.Join(ChartDir(), "README.md") }

// A ValueDoc is one documented value of values.yaml.
type ValueDoc struct {
	// Key is the value's path, "config.dryRun".
	Key string
	// Type is the one its comment names, "(int) ...", else its default's.
	Type string
	// Default is its default, as JSON.
	Default string
	// Description is its comment, after "# --".
	Description string
}

var (
	keyLine  = regexp.MustCompile(`^(\s*)([A-Za-z0-9_]+):`)
	typeNote = regexp.MustCompile(`^\((\w+)\)\s*`)
)

// ValueDocs reads the chart's values.yaml as helm-docs does: a comment
// starting "# --", with the comment lines after it, documents the key on
// the line below it; "(type)" at its start names the type where the
// default (null, say) does not.
func ValueDocs() ([]ValueDoc, error) {
	b, err := os.ReadFile(filepath.Join(ChartDir(), "values.yaml"))
	if err != nil {
		return nil, err
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	type level struct {
		indent int
		key    string
	}
	var (
		path    []level
		docs    []ValueDoc
		comment []string
		inDoc   bool
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "# --" || strings.HasPrefix(trimmed, "# -- "):
			comment, inDoc = []string{strings.TrimSpace(strings.TrimPrefix(trimmed, "# --"))}, true
			continue
		case strings.HasPrefix(trimmed, "#"):
			if inDoc {
				comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			}
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "-"):
			comment, inDoc = nil, false
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			comment, inDoc = nil, false
			continue
		}
		indent := len(m[1])
		for len(path) > 0 && path[len(path)-1].indent >= indent {
			path = path[:len(path)-1]
		}
		path = append(path, level{indent, m[2]})
		if !inDoc {
			continue
		}
		var keys []string
		for _, l := range path {
			keys = append(keys, l.key)
		}
		v, ok := lookup(values, keys)
		if !ok {
			return nil, fmt.Errorf("values.yaml:%d: %s is not a value", n, strings.Join(keys, "."))
		}
		desc := strings.Join(comment, " ")
		typ := typeOf(v)
		if t := typeNote.FindStringSubmatch(desc); t != nil {
			typ, desc = t[1], strings.TrimPrefix(desc, t[0])
		}
		def, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		docs = append(docs, ValueDoc{Key: strings.Join(keys, "."), Type: typ, Default: string(def), Description: desc})
		comment, inDoc = nil, false
	}
	return docs, sc.Err()
}

func lookup(values map[string]any, keys []string) (any, bool) {
	var v any = values
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func typeOf(v any) string {
	switch v := v.(type) {
	case bool:
		return "bool"
	case float64:
		if v == float64(int64(v)) {
			return "int"
		}
		return "float"
	case string:
		return "string"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return "string"
}

// cell escapes a description for a cell of a Markdown table.
var cell = strings.NewReplacer("|", "\\|", "<", "&lt;", ">", "&gt;")

// ValuesREADME is the chart's README.md: what the chart is, how it is
// installed, and a table of its values from values.yaml's comments.
func ValuesREADME() ([]byte, error) {
	docs, err := ValueDocs()
	if err != nil {
		return nil, err
	}
	chart, err := os.ReadFile(filepath.Join(ChartDir(), "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	var meta struct{ Name, Description, Version string }
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return nil, fmt.Errorf("read the chart's metadata, Chart.yaml: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", meta.Name)
	b.WriteString("<!-- Generated from values.yaml's comments: go generate ./tests/helm. Not to be edited. -->\n\n")
	fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(meta.Description))
	fmt.Fprintf(&b, "![Version: %s](https://img.shields.io/badge/Version-%s-informational?style=flat-square)\n\n", meta.Version, strings.ReplaceAll(meta.Version, "-", "--"))
	b.WriteString("```sh\nhelm install fleet-role packaging/helm/fleet-role -n fleet-role --create-namespace --set image.tag=$(make -s image-tag)\n")
	b.WriteString("helm test fleet-role -n fleet-role\n```\n\n")
	b.WriteString("docs/deploying.md describes the chart; examples/ holds values files for common setups, each\nrendered and its configuration validated by the tests.\n\n")
	b.WriteString("## Values\n\n| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s |\n", d.Key, d.Type, strings.ReplaceAll(d.Default, "|", "\\|"), cell.Replace(d.Description))
	}
	return []byte(b.String()), nil
}
