package k3sconfig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// files writes k3s's config file (when main is not "") and drop-ins
// (name to content) in a temporary directory, and returns the config
// file's path.
func files(t *testing.T, main string, dropIns map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if main != "" {
		require.NoError(t, os.WriteFile(file, []byte(main), 0o600))
	}
	if len(dropIns) > 0 {
		require.NoError(t, os.MkdirAll(file+".d", 0o755))
	}
	for name, content := range dropIns {
		require.NoError(t, os.WriteFile(filepath.Join(file+".d", name), []byte(content), 0o600))
	}
	return file
}

func TestNoConfigFileAndNoDropInsGiveK3sDefaultPortAndNoAddresses(t *testing.T) {
	s, err := Read(filepath.Join(t.TempDir(), "config.yaml"), nil)
	require.NoError(t, err)
	assert.Equal(t, Settings{HTTPSPort: 6443}, s)
	assert.Empty(t, s.Own())
}

func TestAConfigFileWithoutTheSettingsGivesK3sDefaultPort(t *testing.T) {
	s, err := Read(files(t, "token-file: /etc/token\nserver: https://10.0.0.1:6443\n", nil), nil)
	require.NoError(t, err)
	assert.Equal(t, 6443, s.HTTPSPort)
}

func TestHTTPSListenPortIsReadFromTheConfigFile(t *testing.T) {
	s, err := Read(files(t, "https-listen-port: 7443\n", nil), nil)
	require.NoError(t, err)
	assert.Equal(t, 7443, s.HTTPSPort)
}

func TestAQuotedPortIsReadAsK3sParsesItsIntFlag(t *testing.T) {
	s, err := Read(files(t, "https-listen-port: \"0x1D13\"\n", nil), nil)
	require.NoError(t, err)
	assert.Equal(t, 7443, s.HTTPSPort)
}

func TestADropInOverridesTheConfigFileAndTheLastDropInByNameWins(t *testing.T) {
	file := files(t, "https-listen-port: 7443\nnode-ip: 10.0.0.5\n", map[string]string{
		"20-b.yml":       "https-listen-port: 9443\n",
		"10-a.yaml":      "https-listen-port: 8443\nnode-ip: 10.0.0.6\n",
		"30-ignored.txt": "https-listen-port: 1111\n",
	})
	dir := filepath.Join(file+".d", "40-a-directory.yaml")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("https-listen-port: 2222\n"), 0o600))
	s, err := Read(file, nil)
	require.NoError(t, err)
	assert.Equal(t, 9443, s.HTTPSPort, "20-b.yml is read after 10-a.yaml; a .txt file and a directory are not read")
	assert.Equal(t, []string{"10.0.0.6"}, s.NodeIPs, "10-a.yaml's node-ip replaces config.yaml's")
}

func TestDropInsAloneAreAConfiguration(t *testing.T) {
	s, err := Read(files(t, "", map[string]string{"90-fleet-role.yaml": "https-listen-port: 7443\n"}), nil)
	require.NoError(t, err)
	assert.Equal(t, 7443, s.HTTPSPort)
}

func TestAKeyWithAPlusAppendsToTheEarlierFilesValues(t *testing.T) {
	file := files(t, "node-ip: 10.0.0.5\n", map[string]string{"10-a.yaml": "node-ip+: [fd00::5]\n"})
	s, err := Read(file, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.5", "fd00::5"}, s.NodeIPs)
}

func TestAPortGivenTwiceByAppendingKeepsTheLast(t *testing.T) {
	file := files(t, "https-listen-port: 7443\n", map[string]string{"10-a.yaml": "https-listen-port+: 8443\n"})
	s, err := Read(file, nil)
	require.NoError(t, err)
	assert.Equal(t, 8443, s.HTTPSPort)
}

func TestSupervisorPortIsNoK3sSettingAndChangesNothing(t *testing.T) {
	s, err := Read(files(t, "supervisor-port: 9345\n", nil), nil)
	require.NoError(t, err)
	assert.Equal(t, 6443, s.HTTPSPort)
}

func TestAPortThatIsNoPortIsAnErrorNamingTheFile(t *testing.T) {
	for _, v := range []string{"seven", "0", "70000", "\"\""} {
		file := files(t, "https-listen-port: "+v+"\n", nil)
		_, err := Read(file, nil)
		require.Error(t, err, v)
		assert.Contains(t, err.Error(), file)
		assert.Contains(t, err.Error(), "https-listen-port")
	}
}

func TestAFileThatIsNoYAMLIsAnErrorNamingTheFile(t *testing.T) {
	file := files(t, "", map[string]string{"10-a.yaml": "node-ip: [10.0.0.5\n"})
	_, err := Read(file, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(file+".d", "10-a.yaml"))
}

func TestOwnAddressesAreEveryNodeIPNodeExternalIPAndAdvertiseAddressCanonical(t *testing.T) {
	file := files(t, `node-ip: "10.0.0.5,fd00:0:0::5"
node-external-ip:
  - 203.0.113.5
  - 2001:db8::5
advertise-address: 198.51.100.5
kube-apiserver-arg:
  - advertise-address=192.0.2.5
  - --audit-log-maxage=30
`, nil)
	s, err := Read(file, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.5", "fd00::5"}, s.NodeIPs)
	assert.Equal(t, []string{"203.0.113.5", "2001:db8::5"}, s.NodeExternalIPs)
	assert.Equal(t, []string{"198.51.100.5", "192.0.2.5"}, s.AdvertiseAddresses)
	assert.ElementsMatch(t, []string{"10.0.0.5", "fd00::5", "203.0.113.5", "2001:db8::5", "198.51.100.5", "192.0.2.5"}, s.Own())
}

// A Docker host's server_args are k3s's command line, put after the
// file's flags: its https-listen-port wins over the file's, its node-ip
// and node-external-ip join the file's, with one dash or two, the value
// after "=" or next; other flags and their values are passed over.
func TestTheCommandLinesPortWinsOverTheFilesAndItsAddressesJoinTheFiles(t *testing.T) {
	file := files(t, "https-listen-port: 7443\nnode-ip: 10.0.0.5\n", nil)
	s, err := Read(file, []string{"--node-label", "node-ip=1.2.3.4", "--https-listen-port=8443", "-node-ip", "10.0.0.6",
		"--node-external-ip=203.0.113.5", "--disable-network-policy", "--advertise-address"})
	require.NoError(t, err)
	assert.Equal(t, 8443, s.HTTPSPort)
	assert.Equal(t, []string{"10.0.0.5", "10.0.0.6"}, s.NodeIPs)
	assert.Equal(t, []string{"203.0.113.5"}, s.NodeExternalIPs)
	assert.Empty(t, s.AdvertiseAddresses, "a flag with no value after it is none")

	_, err = Read(file, []string{"--https-listen-port", "http"})
	assert.ErrorContains(t, err, `https-listen-port "http" is not a port`)
}
