package kubeapi

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// EtcdMember is one member of an etcd cluster run as its own process (the
// etcd make test-bins builds), so that a test can pause it as a host that
// stalls would.
type EtcdMember struct {
	Name      string
	ClientURL string
	cmd       *exec.Cmd
}

// StartEtcdCluster starts n members on loopback, named as k3s names them
// (<node>-<8 hex>, node h1...hn), and waits for each to answer.
func StartEtcdCluster(tb testing.TB, n int) []*EtcdMember {
	tb.Helper()
	bin := filepath.Join(BinDir(), "etcd")
	if _, err := os.Stat(bin); err != nil {
		testhost.Unavailable(tb, "no etcd in %s: run make test-bins", BinDir())
	}
	dir := tb.TempDir()
	var ms []*EtcdMember
	var peers, initial []string
	for i := range n {
		cp, err := testhost.FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		pp, err := testhost.FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		m := &EtcdMember{Name: fmt.Sprintf("h%d-0a1b2c3d", i+1), ClientURL: "http://127.0.0.1:" + strconv.Itoa(cp)}
		peer := "http://127.0.0.1:" + strconv.Itoa(pp)
		peers = append(peers, peer)
		initial = append(initial, m.Name+"="+peer)
		ms = append(ms, m)
	}
	for i, m := range ms {
		log, err := os.Create(filepath.Join(dir, m.Name+".log"))
		if err != nil {
			tb.Fatal(err)
		}
		m.cmd = exec.Command(bin, "--name", m.Name, "--data-dir", filepath.Join(dir, m.Name),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "warn")
		m.cmd.Stdout, m.cmd.Stderr = log, log
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := m.cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
		})
	}
	for _, m := range ms {
		if err := waitHTTP(http.DefaultClient, m.ClientURL+"/health", m.cmd, 30*time.Second); err != nil {
			tb.Fatalf("etcd member %s: %v (logs in %s)", m.Name, err, dir)
		}
	}
	return ms
}

// Pause stops the member's process, as a host that stalls; Resume goes on.
func (m *EtcdMember) Pause() error  { return m.cmd.Process.Signal(syscall.SIGSTOP) }
func (m *EtcdMember) Resume() error { return m.cmd.Process.Signal(syscall.SIGCONT) }
