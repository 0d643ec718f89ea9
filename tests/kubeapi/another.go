package kubeapi

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Another is a second kube-apiserver over the Server's etcd, with its
// certificates and credentials, as each server of a fleet runs its own
// apiserver over one cluster's data.
type Another struct {
	// Addr is its host:port, on loopback.
	Addr string
	cmd  *exec.Cmd
}

// StartAnother starts a second API server on a port of its own and waits
// until it is ready; it is stopped as the test ends.
func (s *Server) StartAnother(tb testhost.T) *Another {
	tb.Helper()
	port, err := testhost.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	args := slices.Clone(s.apiArgs)
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--secure-port":
			args[i+1] = strconv.Itoa(port)
		case "--audit-log-path":
			args[i+1] = filepath.Join(s.dir, "another-"+auditLog)
		}
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "another-kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(s.bins, "kube-apiserver"), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	a := &Another{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	tb.Cleanup(a.stop)
	hc, err := s.adminHTTP()
	if err != nil {
		tb.Fatal(err)
	}
	if err := waitHTTP(hc, "https://"+a.Addr+"/readyz", cmd, 90*time.Second); err != nil {
		tb.Fatal(fmt.Errorf("another kube-apiserver: %w: %s", err, s.logTail("another-kube-apiserver.log", 5)))
	}
	return a
}

// Pause stops the API server's process (SIGSTOP): connections to it are
// accepted by the kernel and never answered, as a server stalled on its
// disk or its CPU.
func (a *Another) Pause() error { return a.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues it.
func (a *Another) Resume() error { return a.cmd.Process.Signal(syscall.SIGCONT) }

func (a *Another) stop() {
	_ = a.Resume()
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}
