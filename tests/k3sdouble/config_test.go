package main

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // relative to the dir; "config.yaml" is the file
		cli   map[string]string // the flags given on the command line
		env   map[string]string
		want  config
	}{
		{
			name: "no file and no drop-in is no config, and the environment is read",
			env:  map[string]string{"K3S_URL": "https://10.0.0.1:6443", "K3S_TOKEN": "t"},
			want: config{Server: "https://10.0.0.1:6443", Token: "t"},
		},
		{
			name:  "the config file's server wins over K3S_URL",
			files: map[string]string{"config.yaml": "server: https://10.0.0.2:6443\n"},
			env:   map[string]string{"K3S_URL": "https://10.0.0.1:6443"},
			want:  config{Server: "https://10.0.0.2:6443"},
		},
		{
			name: "a drop-in's server wins over the file's, and the later drop-in over the earlier",
			files: map[string]string{
				"config.yaml":             "server: https://10.0.0.1:6443\ntoken: a\n",
				"config.yaml.d/10-a.yaml": "server: https://10.0.0.2:6443\n",
				"config.yaml.d/20-b.yml":  "server: https://10.0.0.3:6443\n",
			},
			want: config{Server: "https://10.0.0.3:6443", Token: "a"},
		},
		{
			name: "drop-ins are read in the order of their names, not of their creation",
			files: map[string]string{
				"config.yaml.d/b.yaml": "server: https://10.0.0.2:6443\n",
				"config.yaml.d/a.yaml": "server: https://10.0.0.1:6443\n",
			},
			want: config{Server: "https://10.0.0.2:6443"},
		},
		{
			name: "files in the drop-in dir not ending in .yaml or .yml are ignored",
			files: map[string]string{
				"config.yaml":            "cluster-init: true\n",
				"config.yaml.d/zz.txt":   "server: https://10.0.0.9:6443\n",
				"config.yaml.d/zz.yaml~": "server: https://10.0.0.9:6443\n",
				"config.yaml.d/A.YAML":   "token: upper\n",
			},
			want: config{ClusterInit: true, Token: "upper"},
		},
		{
			name:  "a token file replaces the token",
			files: map[string]string{"config.yaml": "token: inline\ntoken-file: TOKENFILE\n", "token": "from-file\n"},
			want:  config{Token: "from-file"},
		},
		{
			name:  "K3S_TOKEN_FILE is read when the config names no token file",
			files: map[string]string{"token": "from-env-file\n"},
			env:   map[string]string{"K3S_TOKEN": "env", "K3S_TOKEN_FILE": "TOKENFILE"},
			want:  config{Token: "from-env-file"},
		},
		{
			name:  "--token-file given wins over the config file's token-file and token",
			files: map[string]string{"config.yaml": "token: inline\ntoken-file: /nonexistent\n", "token": "from-flag-file\n"},
			cli:   map[string]string{"token-file": "TOKENFILE"},
			want:  config{Token: "from-flag-file"},
		},
		{
			name:  "cluster-init and server both set keep both: k3s then joins the server",
			files: map[string]string{"config.yaml": "cluster-init: true\nserver: https://10.0.0.1:6443\n"},
			want:  config{ClusterInit: true, Server: "https://10.0.0.1:6443"},
		},
		{
			name: "a cluster reset comes from K3S_CLUSTER_RESET, but its restore path from no variable",
			env:  map[string]string{"K3S_CLUSTER_RESET": "true", "K3S_CLUSTER_RESET_RESTORE_PATH": "/s"},
			want: config{ClusterReset: true},
		},
		{
			name:  "the flags of a cluster reset win over the config file's keys",
			files: map[string]string{"config.yaml": "cluster-reset: false\ncluster-reset-restore-path: /old\n"},
			cli:   map[string]string{"cluster-reset": "true", "cluster-reset-restore-path": "/snapshots/fleet-role-s1-100"},
			want:  config{ClusterReset: true, ClusterResetRestorePath: "/snapshots/fleet-role-s1-100"},
		},
		{
			name:  "cluster-reset set false in the config file wins over K3S_CLUSTER_RESET",
			files: map[string]string{"config.yaml": "cluster-reset: false\n"},
			env:   map[string]string{"K3S_CLUSTER_RESET": "true"},
			want:  config{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				data = strings.ReplaceAll(data, "TOKENFILE", filepath.Join(dir, "token"))
				write(t, filepath.Join(dir, name), data)
			}
			getenv := func(k string) string { return strings.ReplaceAll(tt.env[k], "TOKENFILE", filepath.Join(dir, "token")) }
			cli := map[string]string{}
			for k, v := range tt.cli {
				cli[k] = strings.ReplaceAll(v, "TOKENFILE", filepath.Join(dir, "token"))
			}
			got, err := loadConfig(filepath.Join(dir, "config.yaml"), cli, getenv)
			require.NoError(t, err)
			assert.Equal(t, criticalFlags, got.Critical, "k3s's defaults where nothing sets them")
			got.Critical = nil
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestTheCriticalSettingsAreTheFilesWithK3sDefaultsAndDisableServicelbCounts(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.yaml"), "cluster-cidr: 10.52.0.0/16\nsecrets-encryption: true\ndisable:\n  - traefik\n  - servicelb\n")
	write(t, filepath.Join(dir, "config.yaml.d", "10.yaml"), "flannel-backend: host-gw\n")
	got, err := loadConfig(filepath.Join(dir, "config.yaml"), nil, func(string) string { return "" })
	require.NoError(t, err)
	want := maps.Clone(criticalFlags)
	want["cluster-cidr"], want["secrets-encryption"], want["disable-service-lb"], want["flannel-backend"] = "10.52.0.0/16", "true", "true", "host-gw"
	assert.Equal(t, want, got.Critical)
}

func TestAKeyWithAPlusAppendsToTheEarlierFilesValues(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.yaml"), "node-label: [a=1]\n")
	write(t, filepath.Join(dir, "config.yaml.d", "x.yaml"), "node-label+: [b=2]\n")
	values, err := readConfigFiles(filepath.Join(dir, "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, []string{"a=1", "b=2"}, values["node-label"])
	c, err := loadConfig(filepath.Join(dir, "config.yaml"), nil, func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, []string{"a=1", "b=2"}, c.NodeLabels, "the kubelet's node-labels")
}

func TestBootstrapKey(t *testing.T) {
	tests := []struct {
		name, a, b string
		same       bool
	}{
		{"a bare passphrase and the full token with the same password share the key", "secret", "K10" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "::server:secret", true},
		{"a token without a CA hash shares the key too", "secret", "K10::server:secret", true},
		{"different passwords have different keys", "secret", "other", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, err := bootstrapKey(tt.a)
			require.NoError(t, err)
			kb, err := bootstrapKey(tt.b)
			require.NoError(t, err)
			assert.Equal(t, tt.same, ka == kb, "%s vs %s", ka, kb)
			assert.Regexp(t, `^/bootstrap/[0-9a-f]{12}$`, ka)
		})
	}
	// sha256("secret") = 2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b
	k, err := bootstrapKey("secret")
	require.NoError(t, err)
	assert.Equal(t, "/bootstrap/2bb80d537b1d", k)
	_, err = bootstrapKey("")
	assert.Error(t, err, "an empty token is refused")
	_, err = bootstrapKey("K10abc::server:")
	assert.Error(t, err, "a token without a password is refused")
}

func TestDuplicateName(t *testing.T) {
	tests := []struct {
		name               string
		member, self, node string
		duplicate          bool
	}{
		{"another incarnation of this node is a duplicate", "v1-0a1b2c3d", "v1-99999999", "v1", true},
		{"this member itself is not", "v1-0a1b2c3d", "v1-0a1b2c3d", "v1", false},
		{"another node's member is not", "v2-0a1b2c3d", "v1-99999999", "v1", false},
		{"a node whose name has hyphens is matched on the last one", "web-01-0a1b2c3d", "web-01-99999999", "web-01", true},
		{"a node whose name is a prefix of another's is not matched", "web-01-0a1b2c3d", "web-99999999", "web", false},
		{"an unnamed member (a learner not yet started) is not", "", "v1-99999999", "v1", false},
		{"a hyphen at the second character is not taken as the suffix", "a-0a1b2c3d", "a-99999999", "a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.duplicate, duplicateName(tt.member, tt.self, tt.node))
		})
	}
}

func TestMemberSync(t *testing.T) {
	const (
		etcd    = "node-role.kubernetes.io/etcd"
		remove  = "etcd.k3s.cattle.io/remove"
		name    = "etcd.k3s.cattle.io/node-name"
		removed = "etcd.k3s.cattle.io/removed-node-name"
	)
	tests := []struct {
		name   string
		labels map[string]string
		ann    map[string]string
		kind   syncKind
	}{
		{"a Node without the etcd label is skipped, even asked for removal", nil,
			map[string]string{remove: "true", name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncNothing},
		{"the etcd label counts whatever its value", map[string]string{etcd: "false"},
			map[string]string{remove: "true", name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncRemove},
		{"remove in another case still asks for removal", map[string]string{etcd: "true"},
			map[string]string{remove: "TRUE", name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncRemove},
		{"no node-address is an error, nothing removed", map[string]string{etcd: "true"},
			map[string]string{remove: "true", name: "v1-a"}, syncError},
		{"no node-name is an error, nothing removed", map[string]string{etcd: "true"},
			map[string]string{remove: "true", AnnotationNodeAddress: "10.0.0.1"}, syncError},
		{"a removal already recorded for the current member is left alone", map[string]string{etcd: "true"},
			map[string]string{remove: "true", removed: "v1-a", name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncNothing},
		{"a removal recorded for an older member is reset, not made", map[string]string{etcd: "true"},
			map[string]string{remove: "true", removed: "v1-a", name: "v1-b", AnnotationNodeAddress: "10.0.0.1"}, syncReset},
		{"a removal recorded with no current member is an error: node-name is looked for first", map[string]string{etcd: "true"},
			map[string]string{remove: "true", removed: "v1-a"}, syncError},
		{"remove not true, nothing to do", map[string]string{etcd: "true"},
			map[string]string{remove: "false", name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncNothing},
		{"no remove annotation, nothing to do", map[string]string{etcd: "true"},
			map[string]string{removed: "v1-a", name: "v1-b"}, syncNothing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act := memberSync(tt.labels, tt.ann)
			assert.Equal(t, tt.kind, act.kind)
			switch act.kind {
			case syncReset:
				assert.Equal(t, map[string]any{removed: nil, remove: nil}, act.patch, "both dropped: the removal is asked again")
			case syncRemove:
				assert.Equal(t, map[string]any{removed: tt.ann[name], remove: nil, name: nil, AnnotationNodeAddress: nil}, act.patch,
					"since k3s v1.34.2 a removal made drops remove")
			}
		})
	}
}

func TestMemberOnRemove(t *testing.T) {
	const (
		etcd    = "node-role.kubernetes.io/etcd"
		remove  = "etcd.k3s.cattle.io/remove"
		name    = "etcd.k3s.cattle.io/node-name"
		removed = "etcd.k3s.cattle.io/removed-node-name"
	)
	tests := []struct {
		name   string
		labels map[string]string
		ann    map[string]string
		kind   syncKind
	}{
		{"a Node without the etcd label goes, its member left", nil,
			map[string]string{name: "s1-a", AnnotationNodeAddress: "10.0.0.5"}, syncNothing},
		{"an etcd Node's member is removed", map[string]string{etcd: "true"},
			map[string]string{name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncRemove},
		{"the etcd label counts whatever its value", map[string]string{etcd: "false"},
			map[string]string{name: "v1-a", AnnotationNodeAddress: "10.0.0.1"}, syncRemove},
		{"no node-name is an error: the Node stays", map[string]string{etcd: "true"},
			map[string]string{AnnotationNodeAddress: "10.0.0.1"}, syncError},
		{"no node-address is an error: the Node stays", map[string]string{etcd: "true"},
			map[string]string{name: "v1-a"}, syncError},
		{"a member removed on the remove annotation already goes", map[string]string{etcd: "true"},
			map[string]string{remove: "TRUE", removed: "v1-a"}, syncNothing},
		{"a removed-node-name is enough, whatever remove says", map[string]string{etcd: "true"},
			map[string]string{removed: "v1-a"}, syncNothing},
		{"an empty removed-node-name is not enough", map[string]string{etcd: "true"},
			map[string]string{remove: "true", removed: "", name: "v1-b", AnnotationNodeAddress: "10.0.0.1"}, syncRemove},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act := memberOnRemove(tt.labels, tt.ann)
			assert.Equal(t, tt.kind, act.kind)
			if act.kind == syncRemove {
				assert.Equal(t, tt.ann[name], act.name)
				assert.Equal(t, tt.ann[AnnotationNodeAddress], act.address)
			}
		})
	}
}

// TestTheRemovalsPatchFailsWholeWhenAnAnnotationItDropsIsGoneAlready
// applies annotationOps with the JSON patch library the API server applies
// a types.JSONPatchType patch with (k8s.io/apiserver's patcher), so that
// a clean-up which dropped node-name first leaves k3s's patch refused, as
// on k3s.
func TestTheRemovalsPatchFailsWholeWhenAnAnnotationItDropsIsGoneAlready(t *testing.T) {
	act := memberSync(map[string]string{"node-role.kubernetes.io/etcd": "true"},
		map[string]string{"etcd.k3s.cattle.io/remove": "true", "etcd.k3s.cattle.io/node-name": "v1-a", AnnotationNodeAddress: "10.0.0.1"})
	require.Equal(t, syncRemove, act.kind)
	p, err := jsonpatch.DecodePatch(annotationOps(act.patch))
	require.NoError(t, err)

	whole := `{"metadata":{"annotations":{"etcd.k3s.cattle.io/remove":"true","etcd.k3s.cattle.io/node-name":"v1-a","etcd.k3s.cattle.io/node-address":"10.0.0.1","fleet-role.io/probe":"{}"}}}`
	out, err := p.Apply([]byte(whole))
	require.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"annotations":{"etcd.k3s.cattle.io/removed-node-name":"v1-a","fleet-role.io/probe":"{}"}}}`, string(out))

	cleaned := `{"metadata":{"annotations":{"etcd.k3s.cattle.io/remove":"true","etcd.k3s.cattle.io/node-address":"10.0.0.1"}}}`
	_, err = p.Apply([]byte(cleaned))
	require.Error(t, err, "node-name gone already: the patch is refused whole")
}
