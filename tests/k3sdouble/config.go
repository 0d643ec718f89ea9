package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// config is what the double takes from k3s's configuration: the config
// file, its drop-ins and the K3S_* environment.
type config struct {
	// Server is the URL joined through (`server:` or K3S_URL).
	Server string
	// ClusterInit: `cluster-init: true`.
	ClusterInit bool
	// Token is the cluster's token as given (`token:`, `token-file:`,
	// K3S_TOKEN or K3S_TOKEN_FILE), empty when none is.
	Token string
	// ClusterReset: `cluster-reset: true` (--cluster-reset,
	// K3S_CLUSTER_RESET); ClusterResetRestorePath the snapshot it
	// restores (--cluster-reset-restore-path, which has no variable).
	// k3s: pkg/cli/cmds (server.go), ServerFlags.
	ClusterReset            bool
	ClusterResetRestorePath string
	// NodeLabels are the Node's labels k3s puts on it at every start
	// (`node-label:`, each key=value). k3s: pkg/cli/cmds (agent.go),
	// NodeLabels.
	NodeLabels []string
	// Critical are the server's critical settings, by their flag's name,
	// as k3s compares them with the server it joins (criticalFlags).
	Critical map[string]string
}

// criticalFlags are the flags of k3s's CriticalControlArgs that a config
// file sets, with k3s's defaults (pkg/daemons/config/types.go,
// CriticalControlArgs, the `cli` tags; the defaults in pkg/cli/cmds
// server.go). cluster-dns is derived from service-cidr when unset, and
// compared as given. disable-service-lb is also set by `disable:
// servicelb` (pkg/cli/server, run).
var criticalFlags = map[string]string{
	"cluster-cidr": "10.42.0.0/16", "service-cidr": "10.43.0.0/16", "cluster-dns": "", "cluster-domain": "cluster.local",
	"disable-cloud-controller": "false", "disable-helm-controller": "false", "disable-network-policy": "false",
	"disable-service-lb": "false", "secrets-encryption": "false", "secrets-encryption-provider": "aescbc",
	"embedded-registry": "false", "flannel-backend": "vxlan", "flannel-ipv6-masq": "false", "flannel-external-ip": "false",
	"egress-selector-mode": "agent", "supervisor-metrics": "false",
}

// critical reads the critical settings from the values given.
func critical(values map[string][]string) map[string]string {
	out := make(map[string]string, len(criticalFlags))
	for k, def := range criticalFlags {
		v, ok := last(values, k)
		switch {
		case !ok:
			v = def
		case v == "" && def == "false":
			v = "true" // a boolean flag given with no value
		}
		out[k] = v
	}
	for _, d := range values["disable"] {
		for _, part := range strings.Split(d, ",") {
			if strings.TrimSpace(part) == "servicelb" {
				out["disable-service-lb"] = "true"
			}
		}
	}
	return out
}

// dropIns are the drop-in files of a config file, in the order k3s reads
// them: the regular files of <file>.d whose names end in .yaml or .yml
// (any case), sorted by name (os.ReadDir's order). k3s: pkg/configfilearg
// (parser.go), dotDFiles.
func dropIns(file string) ([]string, error) {
	entries, err := os.ReadDir(file + ".d")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := strings.ToLower(e.Name())
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		out = append(out, filepath.Join(file+".d", e.Name()))
	}
	return out, nil
}

// readConfigFiles merges the config file and its drop-ins into one map of
// key to values, as k3s does before it turns them into flags: the file
// first, then each drop-in; a later file's key replaces an earlier one's,
// and a key written "key+" appends to it. No file and no drop-in is no
// config; drop-ins without the file are enough. k3s: pkg/configfilearg
// (parser.go), readConfigFile.
func readConfigFiles(file string) (map[string][]string, error) {
	files, err := dropIns(file)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(file); err == nil {
		files = append([]string{file}, files...)
	} else if !errors.Is(err, os.ErrNotExist) || len(files) == 0 {
		if errors.Is(err, os.ErrNotExist) {
			return map[string][]string{}, nil
		}
		return nil, err
	}
	values := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc map[string]any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
		for k, v := range doc {
			key, appendTo := strings.CutSuffix(k, "+")
			if appendTo {
				values[key] = append(values[key], asStrings(v)...)
			} else {
				values[key] = asStrings(v)
			}
		}
	}
	return values, nil
}

func asStrings(v any) []string {
	switch v := v.(type) {
	case nil:
		return []string{""}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
		return out
	default:
		return []string{fmt.Sprint(v)}
	}
}

// last is the value a flag given several times takes: the last one.
func last(values map[string][]string, key string) (string, bool) {
	v := values[key]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// loadConfig reads the config file and its drop-ins, then the flags given
// on the command line (cli: a key of the config file to its value, such
// as "token-file"), then the environment. The config file's keys become
// command-line flags put before the ones given, so a flag given wins over
// the file's key (k3s: pkg/configfilearg, Parser.Parse, which inserts the
// file's flags after the subcommand; urfave/cli keeps a flag's last
// value); and a flag, given or from the file, wins over its K3S_*
// variable (urfave/cli's EnvVar), so `server:` wins over K3S_URL and
// `token:` over K3S_TOKEN. A token file (`token-file:`, --token-file or
// K3S_TOKEN_FILE) replaces the token (k3s: pkg/cli/agent and
// pkg/cli/server, Run, read TokenFile into Token).
func loadConfig(file string, cli map[string]string, getenv func(string) string) (config, error) {
	values, err := readConfigFiles(file)
	if err != nil {
		return config{}, fmt.Errorf("read %s: %w", file, err)
	}
	for k, v := range cli {
		values[k] = []string{v}
	}
	var c config
	pick := func(key, env string) string {
		if v, ok := last(values, key); ok {
			return v
		}
		return getenv(env)
	}
	c.Server = pick("server", "K3S_URL")
	c.Critical = critical(values)
	c.Token = pick("token", "K3S_TOKEN")
	// flag reads a boolean flag, given with no value as true; env is its
	// variable, "" for none.
	flag := func(key, env string) (bool, error) {
		v, ok := last(values, key)
		switch {
		case ok && v == "":
			return true, nil
		case !ok && (env == "" || getenv(env) == ""):
			return false, nil
		case !ok:
			v = getenv(env)
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s: %w", key, err)
		}
		return b, nil
	}
	if c.ClusterInit, err = flag("cluster-init", ""); err != nil {
		return config{}, err
	}
	if c.ClusterReset, err = flag("cluster-reset", "K3S_CLUSTER_RESET"); err != nil {
		return config{}, err
	}
	c.ClusterResetRestorePath, _ = last(values, "cluster-reset-restore-path")
	c.NodeLabels = values["node-label"]
	if tf := pick("token-file", "K3S_TOKEN_FILE"); tf != "" {
		data, err := os.ReadFile(tf)
		if err != nil {
			return config{}, fmt.Errorf("read token file: %w", err)
		}
		c.Token = strings.TrimSpace(string(data))
	}
	return c, nil
}

// tokenPassword is the password part of a k3s token: the token itself
// when it is a bare passphrase, else what follows "<user>:" in
// "K10<ca-hash>::<user>:<password>". k3s: pkg/clientaccess (token.go),
// parseToken; pkg/cluster (storage.go), normalizeToken.
func tokenPassword(token string) (string, error) {
	if token == "" {
		return "", errors.New("token must not be empty")
	}
	rest, ok := strings.CutPrefix(token, "K10")
	if !ok {
		return token, nil
	}
	if _, after, found := strings.Cut(rest, "::"); found {
		rest = after
	}
	_, password, found := strings.Cut(rest, ":")
	if !found || password == "" {
		return "", errors.New("invalid token format")
	}
	return password, nil
}

// bootstrapKey is the etcd key k3s keeps its bootstrap data under for a
// token: "/bootstrap/" and the first 12 hex digits of the SHA-256 of the
// token's password. k3s: pkg/cluster (encrypt.go), storageKey and
// keyHash.
func bootstrapKey(token string) (string, error) {
	password, err := tokenPassword(token)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(password))
	return "/bootstrap/" + hex.EncodeToString(sum[:])[:12], nil
}

// duplicateName says whether a listed member belongs to another
// incarnation of this node: its name is not this member's, but its name
// without the last "-<suffix>" (when that hyphen is past the second
// character) is this node's name. k3s: pkg/etcd/etcd.go, (*ETCD).join.
func duplicateName(member, self, node string) bool {
	memberNode := member
	if i := strings.LastIndex(member, "-"); i > 1 {
		memberNode = member[:i]
	}
	return member != self && memberNode == node
}
