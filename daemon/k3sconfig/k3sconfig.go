// Package k3sconfig reads the settings of a host's k3s that the agent
// needs, from k3s's config file and its drop-ins merged as k3s merges
// them: the port k3s's server listens on, which the server URL a joining
// server or agent dials names, and the addresses the host's apiserver is
// known by, which the agent must never take for another server's.
//
// What k3s does (k3s-io/k3s):
//
//   - The config file (/etc/rancher/k3s/config.yaml, or --config,
//     K3S_CONFIG_FILE) is read first, then the regular files of
//     <file>.d whose names end in .yaml or .yml (any case), in name
//     order; a later file's key replaces an earlier one's and a key
//     written "key+" appends to it; each value becomes a flag, one per
//     element of a list, put before the flags of the command line, so a
//     flag given on the command line wins (pkg/configfilearg/parser.go:
//     Parse, readConfigFile, dotDFiles). No file and no drop-in is no
//     configuration (Parse, os.IsNotExist).
//   - https-listen-port, 6443 unless set, is the port k3s's supervisor
//     listens on and serves the Kubernetes API on, the kube-apiserver
//     itself listening on loopback behind it (pkg/cli/cmds/server.go:
//     ServerFlags; pkg/cli/server/server.go: run, where SupervisorPort
//     is HTTPSPort when not set; pkg/daemons/control/server.go: defaults,
//     APIServerPort = HTTPSPort+1). k3s has no supervisor-port flag: only
//     RKE2 sets SupervisorPort, in code (its pkg/cli/defaults), and a
//     supervisor-port key in k3s's config file is skipped as an unknown
//     flag (parser.go: stripInvalidFlags). So the `server:` a server joins
//     through (pkg/cluster bootstrap) and an agent's supervisor
//     (pkg/agent/proxy/apiproxy.go: NewSupervisorProxy, whose
//     supervisorPort is the URL's port) are the server's
//     https-listen-port.
//   - The apiserver advertises, in the `kubernetes` EndpointSlice,
//     advertise-address, else the first node-external-ip, else the first
//     node-ip (pkg/cli/server/server.go: run), and a kube-apiserver-arg
//     advertise-address=... given after k3s's own arguments overrides
//     it (pkg/daemons/control/server.go: apiServer, config.GetArgs);
//     its port is advertise-port, https-listen-port unless set
//     (defaults).
package k3sconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v2"
)

// DefaultHTTPSPort is k3s's https-listen-port when none is set (k3s-io/k3s
// pkg/cli/cmds/server.go, ServerFlags).
const DefaultHTTPSPort = 6443

// Settings are what the agent takes from k3s's configuration.
type Settings struct {
	// HTTPSPort is https-listen-port: the port k3s's server listens on
	// for joining servers, agents and API clients.
	HTTPSPort int
	// NodeIPs, NodeExternalIPs and AdvertiseAddresses are node-ip,
	// node-external-ip, and advertise-address with any kube-apiserver-arg
	// advertise-address=..., each split at commas as k3s splits its string
	// slices, IP addresses in their canonical form.
	NodeIPs            []string
	NodeExternalIPs    []string
	AdvertiseAddresses []string
}

// Own are the addresses k3s may advertise this host's apiserver by: every
// node-ip, node-external-ip and advertise-address given. k3s advertises
// one of them (see the package doc); all of them are this host's.
func (s Settings) Own() []string {
	var out []string
	for _, a := range slices.Concat(s.AdvertiseAddresses, s.NodeExternalIPs, s.NodeIPs) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Read reads k3s's settings from file and its drop-ins in file+".d", as
// k3s merges them, then from args, the flags of k3s's command line (a
// Docker host's server_args; none on a systemd host, whose unit's are not
// read), which k3s puts after the file's: an int or string flag given on
// both keeps the command line's, a list flag has both. Neither file nor
// flag gives k3s's defaults.
func Read(file string, args []string) (Settings, error) {
	values, err := Flags(file, args)
	if err != nil {
		return Settings{}, err
	}
	s := Settings{HTTPSPort: DefaultHTTPSPort}
	if v, ok := last(values["https-listen-port"]); ok {
		// Note: a flag given twice keeps its last value; an int flag is
		// parsed as Go's flag package parses it (base prefixes allowed).
		port, err := strconv.ParseInt(v, 0, 64)
		if err != nil || port < 1 || port > 65535 {
			return Settings{}, fmt.Errorf("k3s's configuration %s: https-listen-port %q is not a port", file, v)
		}
		s.HTTPSPort = int(port)
	}
	s.NodeIPs = split(values["node-ip"])
	s.NodeExternalIPs = split(values["node-external-ip"])
	if v, ok := last(values["advertise-address"]); ok && v != "" {
		s.AdvertiseAddresses = append(s.AdvertiseAddresses, canonical(v))
	}
	for _, arg := range values["kube-apiserver-arg"] {
		// Note: k3s's config.GetArgs reads each as key=value, "--" left
		// off, over its own arguments; every one given names this host.
		k, v, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if ok && k == "advertise-address" && v != "" {
			s.AdvertiseAddresses = append(s.AdvertiseAddresses, canonical(v))
		}
	}
	return s, nil
}

// read are the flags Read takes from the command line.
var read = []string{"https-listen-port", "node-ip", "node-external-ip", "advertise-address", "kube-apiserver-arg"}

// commandLine are the values of the flags Read takes from args, in
// order: urfave/cli, as k3s parses its command line, takes a flag with
// one dash or two, its value after "=" or as the next argument.
func commandLine(args []string) map[string][]string {
	out := map[string][]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, value, hasValue := strings.Cut(name, "=")
		if !slices.Contains(read, name) {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				continue
			}
			i++
			value = args[i]
		}
		out[name] = append(out[name], value)
	}
	return out
}

// dropIns are the drop-in files of a config file, in the order k3s reads
// them: the regular files of <file>.d whose names end in .yaml or .yml
// (any case), by name (k3s: dotDFiles).
func dropIns(file string) ([]string, error) {
	entries, err := os.ReadDir(file + ".d")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("k3s's configuration: %w", err)
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

// Flags are k3s's config file's and its drop-ins' flags, merged as k3s
// merges them (readFiles), each key to the values k3s's flag parser is
// handed for it, in order, with the values args gives the flags Read
// takes (commandLine) after them, as k3s puts its command line after the
// files' flags.
func Flags(file string, args []string) (map[string][]string, error) {
	values, err := readFiles(file)
	if err != nil {
		return nil, err
	}
	for k, v := range commandLine(args) {
		values[k] = append(values[k], v...)
	}
	return values, nil
}

// readFiles merges the config file and its drop-ins into each key's
// values, as k3s does before it turns them into flags: a copy of k3s-io/k3s
// pkg/configfilearg/parser.go, readConfigFile: the file first, then its
// drop-ins (dropIns); a key set again replaces the value before, a key
// ending in "+" appends to it (toSlice); a list gives its flag once for
// each item.
func readFiles(file string) (map[string][]string, error) {
	files, err := dropIns(file)
	if err != nil {
		return nil, err
	}
	switch _, err := os.Stat(file); {
	case err == nil:
		files = append([]string{file}, files...)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("k3s's configuration: %w", err)
	}
	values := map[string]any{}
	var keys []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("k3s's configuration: %w", err)
		}
		// Note: yaml.v2's MapSlice, as k3s reads it, keeps the keys'
		// order and YAML 1.1's scalars (yes is true).
		var doc yaml.MapSlice
		if err := yaml.Unmarshal(data, &doc); err != nil {
			// Note: the YAML library quotes the values it could not
			// read between backquotes, a token among them perhaps.
			return nil, fmt.Errorf("k3s's configuration %s: %s", f, yamlQuoted.ReplaceAllString(err.Error(), "`...`"))
		}
		for _, item := range doc {
			key, add := strings.CutSuffix(toString(item.Key), "+")
			old, ok := values[key]
			if !ok {
				keys = append(keys, key)
			}
			if ok && add {
				values[key] = append(toSlice(old), toSlice(item.Value)...)
			} else {
				values[key] = item.Value
			}
		}
	}
	flags := make(map[string][]string, len(values))
	for _, k := range keys {
		if list, ok := values[k].([]any); ok {
			for _, item := range list {
				flags[k] = append(flags[k], toString(item))
			}
			continue
		}
		flags[k] = []string{toString(values[k])}
	}
	return flags, nil
}

// yamlQuoted is a value the YAML library quotes in an error.
var yamlQuoted = regexp.MustCompile("`[^`]*`")

// toString is k3s's ToString of a YAML value (k3s-io/k3s
// pkg/configfilearg/convert.go): a list's first item, printed, trimmed.
func toString(v any) string {
	if list, ok := v.([]any); ok {
		if len(list) == 0 {
			return ""
		}
		v = list[0]
	}
	if v == nil {
		return ""
	}
	if t, ok := v.(time.Time); ok {
		return t.Format(time.RFC3339)
	}
	return strings.TrimSpace(fmt.Sprint(v))
}

// toSlice is k3s's toSlice (pkg/configfilearg/parser.go): a value
// appended to with "key+".
func toSlice(v any) []any {
	switch k := v.(type) {
	case string:
		return []any{k}
	case []any:
		return k
	default:
		if s := toString(v); s != "" {
			return []any{s}
		}
		return nil
	}
}

func last(v []string) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// split splits a string slice flag's values at commas, trimmed, empty ones
// dropped, as k3s's util.SplitStringSlice does, each IP address in its
// canonical form.
func split(values []string) []string {
	var out []string
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, canonical(part))
			}
		}
	}
	return out
}

// canonical is an IP address as Kubernetes writes it (the EndpointSlice's
// addresses), anything else as given.
func canonical(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return s
}
