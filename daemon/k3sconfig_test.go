package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// k3sHost lays out a host's k3s config in a temp dir: config.yaml and
// the drop-ins of config.yaml.d, each given by name (an empty content
// for config.yaml leaves it out).
func k3sHost(t *testing.T, config string, dropIns map[string]string) host {
	t.Helper()
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc", "rancher", "k3s")
	require.NoError(t, os.MkdirAll(filepath.Join(etc, "config.yaml.d"), 0o755))
	if config != "" {
		require.NoError(t, os.WriteFile(filepath.Join(etc, "config.yaml"), []byte(config), 0o644))
	}
	for name, content := range dropIns {
		require.NoError(t, os.WriteFile(filepath.Join(etc, "config.yaml.d", name), []byte(content), 0o644))
	}
	return host{dataDir: filepath.Join(dir, "var", "lib", "rancher", "k3s"), joinFile: filepath.Join(etc, "config.yaml.d", "90-fleet-role.yaml"),
		k3sFile: filepath.Join(etc, "config.yaml")}
}

func TestTheDropInsMergeOverConfigYAMLInLexicalOrderAsK3sMergesThem(t *testing.T) {
	h := k3sHost(t, "cluster-cidr: 10.42.0.0/16\ndisable:\n  - servicelb\ncluster-domain: first.local\n", map[string]string{
		"10-net.yaml":    "cluster-cidr: 10.44.0.0/16\ndisable+: traefik\n",
		"20-domain.yaml": "cluster-domain: second.local\n",
		"30-domain.YML":  "cluster-domain: third.local\n",
		"40-notes.txt":   "flannel-backend: host-gw\n",
	})
	require.NoError(t, os.Mkdir(filepath.Join(filepath.Dir(h.joinFile), "50-dir.yaml"), 0o755))
	c := h.k3sConfig()
	require.Empty(t, c.Error)
	assert.Equal(t, "10.44.0.0/16", c.Critical["cluster-cidr"], "a drop-in's key replaces config.yaml's")
	assert.Equal(t, "true", c.Critical["disable-service-lb"], "disable+ appends traefik to config.yaml's disable list, servicelb kept")
	assert.Equal(t, "third.local", c.Critical["cluster-domain"], "the last drop-in in lexical order wins, .YML read too")
	assert.Equal(t, "vxlan", c.Critical["flannel-backend"], "a file not .yaml or .yml is not read")
}

func TestEveryCriticalSettingTakesK3sDefaultWhenNoConfigFileSetsIt(t *testing.T) {
	c := k3sHost(t, "", nil).k3sConfig()
	require.Empty(t, c.Error)
	assert.Equal(t, map[string]string{
		"cluster-cidr": "10.42.0.0/16", "service-cidr": "10.43.0.0/16", "cluster-dns": "10.43.0.10", "cluster-domain": "cluster.local",
		"disable-cloud-controller": "false", "disable-helm-controller": "false", "disable-network-policy": "false", "disable-service-lb": "false",
		"secrets-encryption": "false", "secrets-encryption-provider": "aescbc", "embedded-registry": "false",
		"flannel-backend": "vxlan", "flannel-ipv6-masq": "false", "flannel-external-ip": "false",
		"egress-selector-mode": "agent", "supervisor-metrics": "false",
	}, c.Critical)
	assert.Empty(t, c.TokenCAHash)
	assert.Empty(t, c.ServerCAHash, "no server CA in the data dir")
}

func TestSettingsAreResolvedAsK3sResolvesThem(t *testing.T) {
	c := k3sHost(t, strings.Join([]string{
		"cluster-cidr: 10.42.1.0/16,fd00:42::/56",
		"service-cidr: [10.96.0.0/12]",
		"disable-network-policy: yes",
		"secrets-encryption: \"1\"",
		"egress-selector-mode: cluster",
		"flannel-backend: [host-gw, wireguard-native]",
		"disable: traefik,servicelb",
	}, "\n"), nil).k3sConfig()
	require.Empty(t, c.Error)
	assert.Equal(t, "10.42.0.0/16,fd00:42::/56", c.Critical["cluster-cidr"], "each CIDR's network, in order")
	assert.Equal(t, "10.96.0.0/12", c.Critical["service-cidr"])
	assert.Equal(t, "10.96.0.10", c.Critical["cluster-dns"], "the service CIDR's tenth address")
	assert.Equal(t, "true", c.Critical["disable-network-policy"], "YAML's yes is true, as for k3s's YAML v2")
	assert.Equal(t, "true", c.Critical["secrets-encryption"])
	assert.Equal(t, "cluster", c.Critical["egress-selector-mode"])
	assert.Equal(t, "true", c.Critical["disable-service-lb"])
	assert.Equal(t, "wireguard-native", c.Critical["flannel-backend"], "a list given to a flag of one value: the last item wins")
}

func TestAnIPv6NodeIPTakesK3sIPv6Defaults(t *testing.T) {
	c := k3sHost(t, "node-ip: fd00:1::5\n", nil).k3sConfig()
	require.Empty(t, c.Error)
	assert.Equal(t, "fd00:42::/56", c.Critical["cluster-cidr"])
	assert.Equal(t, "fd00:43::/112", c.Critical["service-cidr"])
	assert.Equal(t, "fd00:43::a", c.Critical["cluster-dns"])
}

func TestAValueK3sCannotParseIsAnErrorNamingTheSetting(t *testing.T) {
	c := k3sHost(t, "cluster-cidr: 10.42.0.0\nflannel-ipv6-masq: maybe\n", nil).k3sConfig()
	assert.Contains(t, c.Error, `cluster-cidr: "10.42.0.0" is not a CIDR`)
	assert.Contains(t, c.Error, `flannel-ipv6-masq: "maybe" is not a boolean`)
	assert.Nil(t, c.Critical)
}

const testCAHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestTheTokensCAHashIsPublishedAndNeverItsPassword(t *testing.T) {
	for _, tc := range []struct {
		name, config, file, want string
	}{
		{name: "full token", config: "token: K10" + testCAHash + "::server:s3cr3tpassw0rd\n", want: testCAHash},
		{name: "bare password", config: "token: s3cr3tpassw0rd\n", want: ""},
		{name: "token-file wins over token", config: "token: K10" + strings.Repeat("0", 64) + "::server:s3cr3tpassw0rd\ntoken-file: TOKENFILE\n",
			file: "K10" + testCAHash + "::server:s3cr3tpassw0rd\n", want: testCAHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := k3sHost(t, "", nil)
			tokenFile := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(tokenFile, []byte(tc.file), 0o600))
			require.NoError(t, os.WriteFile(h.k3sFile, []byte(strings.ReplaceAll(tc.config, "TOKENFILE", tokenFile)), 0o600))
			c := h.k3sConfig()
			require.Empty(t, c.Error)
			assert.Equal(t, tc.want, c.TokenCAHash)
			b, err := json.Marshal(c)
			require.NoError(t, err)
			assert.NotContains(t, string(b), "s3cr3t")
		})
	}
}

func TestATokenWithACAHashK3sRefusesIsAnErrorThatDoesNotShowIt(t *testing.T) {
	c := k3sHost(t, "token: K10abc::server:s3cr3tpassw0rd\n", nil).k3sConfig()
	assert.Contains(t, c.TokenError, "invalid token CA hash length")
	assert.NotContains(t, c.TokenError, "s3cr3t")
	assert.Empty(t, c.Error)
	assert.Equal(t, "10.42.0.0/16", c.Critical["cluster-cidr"], "the settings are still given")
}

func TestAnUnreadableTokenFileIsATokenErrorAndTheSettingsAreStillGiven(t *testing.T) {
	c := k3sHost(t, "token-file: /nonexistent/token\nflannel-backend: host-gw\n", nil).k3sConfig()
	assert.Contains(t, c.TokenError, "token-file: open /nonexistent/token")
	assert.Empty(t, c.Error)
	assert.Equal(t, "host-gw", c.Critical["flannel-backend"])
}

func TestAConfigFileThatIsNoMappingIsAnErrorThatDoesNotShowItsValue(t *testing.T) {
	c := k3sHost(t, "- s3cr3t\n", nil).k3sConfig()
	assert.Contains(t, c.Error, "cannot unmarshal")
	assert.Contains(t, c.Error, "config.yaml")
	assert.NotContains(t, c.Error, "s3cr3t")
}

// testCert makes a certificate signed by parent (self-signed when nil).
func testCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, SubjectKeyId: []byte(cn)}
	if parent == nil {
		parent, parentKey = tmpl, key
	} else {
		tmpl.AuthorityKeyId = parent.SubjectKeyId
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c, key
}

func pemOf(certs ...*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

func TestTheServerCAHashIsK3sHashOfTheFileOrOfTheBundlesRoot(t *testing.T) {
	root, rootKey := testCert(t, "root", nil, nil)
	inter, _ := testCert(t, "intermediate", root, rootKey)

	h := k3sHost(t, "", nil)
	tls := filepath.Join(h.dataDir, "server", "tls")
	require.NoError(t, os.MkdirAll(tls, 0o755))
	single := pemOf(root)
	require.NoError(t, os.WriteFile(filepath.Join(tls, "server-ca.crt"), single, 0o644))
	sum := sha256.Sum256(single)
	assert.Equal(t, hex.EncodeToString(sum[:]), h.k3sConfig().ServerCAHash, "one certificate: the file's bytes")

	require.NoError(t, os.WriteFile(filepath.Join(tls, "server-ca.crt"), pemOf(inter, root), 0o644))
	sum = sha256.Sum256(root.Raw)
	assert.Equal(t, hex.EncodeToString(sum[:]), h.k3sConfig().ServerCAHash, "a bundle: its root's DER")
}
