// Package testhost starts the test hosts the real-part suites run against:
// containers on the local Docker engine, among them a Debian host with
// systemd as PID 1 and a Docker host (the same with a Docker engine of its
// own), built without any registry by tests/images/build-images.sh. Under
// CI a missing Docker engine or image fails the test; elsewhere it skips
// it, saying what to run.
package testhost

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SystemdImage is the systemd host image build-images.sh tags.
const SystemdImage = "fleet-role-test/systemd:latest"

// Label marks every container the tests start, for a sweep.
const Label = "fleet-role-test=1"

// T is what the helpers need of a test. testing.TB has it; so does a
// program that runs a simulated fleet (tests/demo).
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
	Cleanup(func())
}

// Unavailable skips the test, or fails it under CI, where a real part the
// test needs is missing.
func Unavailable(t T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("CI=%s: %s", os.Getenv("CI"), msg)
	}
	t.Skip(msg)
}

// RequireDocker checks the Docker engine answers.
func RequireDocker(t T) {
	t.Helper()
	if err := DockerAnswers(); err != nil {
		Unavailable(t, "no Docker engine answers (%v); start dockerd, as .ci/run does", err)
	}
}

// DockerAnswers says why no Docker engine answers; nil when one does.
func DockerAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// RequireImage checks a test image is loaded.
func RequireImage(t T, image string) {
	t.Helper()
	RequireDocker(t)
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		Unavailable(t, "image %s is missing: run tests/images/build-images.sh", image)
	}
}

// Iptables runs iptables on this machine, which a test needs to cut a
// link; a missing iptables is Unavailable.
func Iptables(t T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		Unavailable(t, "no iptables: install Debian's iptables, as .ci/run does")
	}
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Docker runs the docker command and returns its trimmed output.
func Docker(t T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// SystemdHost is a container running systemd as PID 1, whose system bus
// is reachable from the test binary at Bus, and whose /run/fleet-role-test
// is the host directory Shared.
type SystemdHost struct {
	Name   string
	Bus    string
	Shared string
}

// privileges are what the container needs to run systemd: on engines that
// refuse --privileged here (a capability missing from the bounding set),
// every capability but that one, unconfined.
func privileges() []string {
	return []string{"--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
		"--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined"}
}

// StartSystemdHost starts a systemd host and waits for it to be running;
// extra are more docker run flags (--network host, say).
func StartSystemdHost(t testing.TB, extra ...string) *SystemdHost {
	t.Helper()
	return StartSystemdHostIn(t, t.TempDir(), extra...)
}

// StartSystemdHostIn is StartSystemdHost with the host's directories
// (its bus, its shared directory) under dir.
func StartSystemdHostIn(t T, dir string, extra ...string) *SystemdHost {
	t.Helper()
	RequireImage(t, SystemdImage)
	return startSystemd(t, SystemdImage, dir, extra...)
}

// systemdFlags are the docker run flags of a container with systemd as
// PID 1 on a cgroup v1 machine: privileges, the machine's cgroup
// hierarchy (systemd fails to start on a read-only or private one), and
// /run as a tmpfs.
func systemdFlags() []string {
	return append(privileges(), "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--tmpfs", "/run", "--tmpfs", "/run/lock")
}

// startSystemd runs image with systemd as PID 1 and waits for it to be
// running; the container and its anonymous volumes are removed at the
// test's end.
func startSystemd(t T, image, dir string, extra ...string) *SystemdHost {
	t.Helper()
	return startSystemdWith(t, image, dir, systemdFlags(), nil, extra...)
}

// startSystemdWith is startSystemd with the docker run flags given in
// place of systemdFlags, and a command in place of the image's (one that
// ends by exec'ing systemd).
func startSystemdWith(t T, image, dir string, flags, command []string, extra ...string) *SystemdHost {
	t.Helper()
	bus := filepath.Join(dir, "bus")
	shared := filepath.Join(dir, "shared")
	for _, d := range []string{bus, shared} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name := fmt.Sprintf("fleet-role-test-sd-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	args := append([]string{"run", "-d", "--name", name, "--label", Label}, flags...)
	args = append(args, "-v", bus+":/run/dbus", "-v", shared+":/run/fleet-role-test")
	args = append(append(append(args, extra...), image), command...)
	Docker(t, args...)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "-v", name).Run() })
	h := &SystemdHost{Name: name, Bus: "unix:path=" + filepath.Join(bus, "system_bus_socket"), Shared: shared}
	h.waitRunning(t)
	if _, err := os.Stat(filepath.Join(bus, "system_bus_socket")); err != nil {
		t.Fatalf("no system bus socket from %s: %v", name, err)
	}
	return h
}

// waitRunning waits for systemd in the host to be running (or degraded).
func (h *SystemdHost) waitRunning(t T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command("docker", "exec", h.Name, "systemctl", "is-system-running").Output()
		state := strings.TrimSpace(string(out))
		if state == "running" || state == "degraded" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd in %s is %q after 60s", h.Name, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Exec runs a command in the host and returns its trimmed output.
func (h *SystemdHost) Exec(t T, args ...string) string {
	t.Helper()
	return Docker(t, append([]string{"exec", h.Name}, args...)...)
}

// StandinImage is the k3s stand-in image Standin builds.
const StandinImage = "fleet-role-test/k3s-standin:latest"

var standin sync.Once

// Standin builds the k3s stand-in image (tests/images/k3sstandin) FROM
// scratch with a static binary, with no registry, once per test binary,
// and returns its name.
func Standin(t T) string {
	t.Helper()
	RequireDocker(t)
	standin.Do(func() {
		dir, err := os.MkdirTemp("", "k3s-standin")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin, err := Build(dir, "k3s", "./tests/images/k3sstandin")
		if err != nil {
			t.Fatal(err)
		}
		ImageOf(t, StandinImage, bin, "/bin/k3s")
	})
	RequireImage(t, StandinImage)
	return StandinImage
}

// ImageOf builds an image FROM scratch holding the static binary at path,
// its entrypoint, tags it and returns the tag. No registry is needed.
func ImageOf(t T, tag, binary, path string) string {
	t.Helper()
	RequireDocker(t)
	dir, err := os.MkdirTemp("", "image")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(binary)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "bin"), data, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(fmt.Sprintf("FROM scratch\nCOPY bin %s\nENTRYPOINT [%q]\n", path, path)), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	Docker(t, "build", "-q", "-t", tag, dir)
	return tag
}

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildFleetRole builds the fleet-role binary into dir as make build does
// (static, stripped) and returns its path.
func BuildFleetRole(dir string) (string, error) {
	return build(dir, "fleet-role", "./cmd/fleet-role", "-X main.version="+Version)
}

// Version is the version BuildFleetRole links into fleet-role, as make
// build links packaging/version.sh's: a pre-release of a build, with the
// "~" and "+" an image's tag may not hold.
const Version = "0.0.0~test+1"

// Build builds a package of the module, static and stripped, into
// dir/name and returns its path.
func Build(dir, name, pkg string) (string, error) {
	return build(dir, name, pkg, "")
}

func build(dir, name, pkg, ldflags string) (string, error) {
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w "+ldflags, "-o", bin, pkg)
	build.Dir = Root()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v: %s", pkg, err, out)
	}
	return bin, nil
}

// Memory reads a process's memory figures from /proc/PID/status, in MiB:
// VmRSS, VmHWM (its peak), RssAnon (heap and stacks), RssFile (the pages
// of its binary it touched).
func Memory(pid int) map[string]float64 {
	out := map[string]float64{}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
			out[k] = kb / 1024
		}
	}
	return out
}

// RunWithFleetRole builds the fleet-role binary into a temporary
// directory, sets *bin to it, runs the tests and removes the directory;
// it returns the tests' exit code, for TestMain.
func RunWithFleetRole(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "fleet-role-test")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if *bin, err = BuildFleetRole(dir); err != nil {
		panic(err)
	}
	return m.Run()
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// FreePort returns a port free on loopback, drawn at random below the
// kernel's ephemeral range (32768 and up) so that neither an outgoing
// connection nor another test's listener on port 0 takes it before the
// process it is for binds it, and never the same one twice in a process.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + mrand.IntN(32768-20000)
		if ports[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		ports[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port on loopback between 20000 and 32767")
}

// SyncBuffer is a bytes.Buffer that one goroutine (a process's output, a
// logger) writes while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
