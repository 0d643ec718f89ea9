package daemon

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/daemon/k3sconfig"
)

// Names of the critical settings, as k3s's cli tags name them
// (pkg/daemons/config/types.go, CriticalControlArgs).
const (
	settingClusterCIDR        = "cluster-cidr"
	settingServiceCIDR        = "service-cidr"
	settingClusterDNS         = "cluster-dns"
	settingClusterDomain      = "cluster-domain"
	settingDisableCCM         = "disable-cloud-controller"
	settingDisableHelm        = "disable-helm-controller"
	settingDisableNPC         = "disable-network-policy"
	settingDisableServiceLB   = "disable-service-lb"
	settingSecretsEncryption  = "secrets-encryption"
	settingEncryptionProvider = "secrets-encryption-provider"
	settingEmbeddedRegistry   = "embedded-registry"
	settingFlannelBackend     = "flannel-backend"
	settingFlannelIPv6Masq    = "flannel-ipv6-masq"
	settingFlannelExternalIP  = "flannel-external-ip"
	settingEgressSelectorMode = "egress-selector-mode"
	settingSupervisorMetrics  = "supervisor-metrics"
)

// criticalBools are the boolean critical settings, each its own flag of
// the same name.
var criticalBools = []string{settingDisableCCM, settingDisableHelm, settingDisableNPC, settingSecretsEncryption,
	settingEmbeddedRegistry, settingFlannelIPv6Masq, settingFlannelExternalIP, settingSupervisorMetrics}

// criticalStrings are the string critical settings with k3s's default for
// each (pkg/cli/cmds/server.go, the flags' Value).
var criticalStrings = []struct{ name, def string }{
	{settingClusterDomain, "cluster.local"},
	{settingEncryptionProvider, "aescbc"},
	{settingFlannelBackend, "vxlan"},
	{settingEgressSelectorMode, "agent"},
}

// criticalSettings resolves, from the merged config files' flags, every
// setting k3s's compareConfig compares as k3s sets it (k3s-io/k3s
// pkg/cli/server/server.go, run: ClusterIPRanges, ServiceIPRanges,
// ClusterDNSs and their defaults; DisableServiceLB from --disable
// servicelb; the others from their flags).
//
// Note: a host with no node-ip in its config files is taken to be IPv4,
// whose defaults are 10.42.0.0/16 and 10.43.0.0/16; k3s takes the
// defaults of its node IP's family (pkg/util/net.go,
// GetDefaultAddresses), which, without node-ip, is the address of the
// default route's interface.
func criticalSettings(flags map[string][]string) (map[string]string, error) {
	last := func(k string) (string, bool) {
		v := flags[k]
		if len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	out := map[string]string{}
	var errs []error
	for _, name := range criticalBools {
		out[name] = "false"
		if v, ok := last(name); ok {
			// urfave/cli's BoolFlag reads --name=value with strconv.ParseBool.
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a boolean", name, v))
				continue
			}
			out[name] = strconv.FormatBool(b)
		}
	}
	for _, s := range criticalStrings {
		out[s.name] = s.def
		if v, ok := last(s.name); ok {
			out[s.name] = v
		}
	}
	out[settingDisableServiceLB] = "false"
	for _, d := range splitList(flags["disable"]) {
		if d == "servicelb" {
			out[settingDisableServiceLB] = "true"
		}
	}

	ipv6 := false
	if ips := splitList(flags["node-ip"]); len(ips) > 0 {
		ipv6 = true
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip); err != nil || a.Is4() {
				ipv6 = false
			}
		}
	}
	clusterDef, serviceDef := "10.42.0.0/16", "10.43.0.0/16"
	if ipv6 {
		clusterDef, serviceDef = "fd00:42::/56", "fd00:43::/112"
	}
	cluster, err := cidrs(settingClusterCIDR, splitList(flags[settingClusterCIDR]), clusterDef)
	errs = append(errs, err)
	out[settingClusterCIDR] = strings.Join(cluster, ",")
	service, err := cidrs(settingServiceCIDR, splitList(flags[settingServiceCIDR]), serviceDef)
	errs = append(errs, err)
	out[settingServiceCIDR] = strings.Join(service, ",")

	var dns []string
	if given := splitList(flags[settingClusterDNS]); len(given) > 0 {
		for _, ip := range given {
			parsed := net.ParseIP(ip)
			if parsed == nil {
				errs = append(errs, fmt.Errorf("%s: %q is not an IP address", settingClusterDNS, ip))
				continue
			}
			dns = append(dns, parsed.String())
		}
	} else {
		// k3s: the tenth address of each service CIDR
		// (utilsnet.GetIndexedIP(svcCIDR, 10)).
		for _, c := range service {
			ip, err := indexedIP(c, 10)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", settingClusterDNS, err))
				continue
			}
			dns = append(dns, ip)
		}
	}
	out[settingClusterDNS] = strings.Join(dns, ",")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// splitList is what k3s makes of a list flag's values: each split at
// commas (pkg/util/client.go, SplitStringSlice), trimmed, empty ones left
// out.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// cidrs parses each CIDR as k3s does (net.ParseCIDR, which keeps the
// network: 10.42.1.0/16 is 10.42.0.0/16), the default when none is given.
func cidrs(name string, given []string, def string) ([]string, error) {
	if len(given) == 0 {
		given = []string{def}
	}
	var out []string
	for _, c := range given {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR", name, c)
		}
		out = append(out, n.String())
	}
	return out, nil
}

// indexedIP is the address index places into the network cidr, which must
// hold it (k8s.io/utils/net, GetIndexedIP).
func indexedIP(cidr string, index int) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", err
	}
	a := p.Masked().Addr()
	for range index {
		a = a.Next()
	}
	if !a.IsValid() || !p.Contains(a) {
		return "", fmt.Errorf("%s holds no address %d", cidr, index)
	}
	return a.String(), nil
}

// tokenCAHash is the CA hash a k3s token pins: the hex between K10 and
// "::" of a token in k3s's full form; empty for a bare password or a
// token without one. It never returns any part of the credentials.
// Note: k3s-io/k3s pkg/clientaccess/token.go, parseToken: a token not
// starting with K10 is a bare password or bootstrap token (no hash); the
// hash, when present, is 64 hex digits, else k3s refuses the token.
func tokenCAHash(token string) (string, error) {
	rest, ok := strings.CutPrefix(token, "K10")
	if !ok {
		return "", nil
	}
	hash, _, found := strings.Cut(rest, "::")
	if !found || hash == "" {
		return "", nil
	}
	if len(hash) != sha256.Size*2 {
		return "", errors.New("the token's CA hash is not 64 hex digits: k3s refuses it (invalid token CA hash length)")
	}
	return strings.ToLower(hash), nil
}

// caHash is the hash k3s puts after K10 in its tokens for a CA bundle:
// the sha256 of the file's bytes when it holds one certificate; of the
// DER of the root the first certificate chains to when it holds more
// (so that the cluster CA may be renewed under the same root).
// Note: a copy of k3s-io/k3s pkg/clientaccess/token.go, hashCA.
func caHash(b []byte) (string, error) {
	var certs []*x509.Certificate
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return "", errors.New("no certificate in it")
	}
	if len(certs) > 1 {
		roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
		for _, c := range certs[1:] {
			if len(c.AuthorityKeyId) == 0 || bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId) {
				roots.AddCert(c)
			} else {
				intermediates.AddCert(c)
			}
		}
		if chains, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates}); err == nil {
			chain := chains[0]
			b = chain[len(chain)-1].Raw
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// k3sConfig reads this host's k3s server configuration for its probe:
// the critical settings and the token's CA hash from the config files
// (token-file wins over token, as in k3s's server run), and the hash of
// the cluster CA in the data dir, where there is one.
func (h host) k3sConfig() *api.K3sConfig {
	c := &api.K3sConfig{}
	if b, err := os.ReadFile(filepath.Join(h.dataDir, "server", "tls", "server-ca.crt")); err == nil {
		if hash, err := caHash(b); err == nil {
			c.ServerCAHash = hash
		}
	}
	flags, err := k3sconfig.Flags(h.k3sFile, h.k3sArgs)
	if err == nil {
		c.Critical, err = criticalSettings(flags)
	}
	if err != nil {
		return &api.K3sConfig{ServerCAHash: c.ServerCAHash, Error: err.Error()}
	}
	if c.TokenCAHash, err = configTokenCAHash(flags); err != nil {
		c.TokenError = err.Error()
	}
	return c
}

// configTokenCAHash is the CA hash of the token the config files give:
// token-file's content, else token's.
func configTokenCAHash(flags map[string][]string) (string, error) {
	token := ""
	if v := flags["token"]; len(v) > 0 {
		token = v[len(v)-1]
	}
	if v := flags["token-file"]; len(v) > 0 && v[len(v)-1] != "" {
		b, err := os.ReadFile(v[len(v)-1])
		if err != nil {
			return "", fmt.Errorf("token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	hash, err := tokenCAHash(token)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hash, nil
}
