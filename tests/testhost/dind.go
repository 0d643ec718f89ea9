package testhost

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DockerHostImage is the Docker host image build-images.sh tags: the
// systemd host image with Debian's docker.io (tests/images/dind).
const DockerHostImage = "fleet-role-test/dind:latest"

// DockerHost is a host with a Docker engine of its own (Docker-in-Docker):
// a container with systemd as PID 1 whose docker.service runs dockerd,
// as on a real Docker host. Its engine keeps its images and containers on
// a volume of the container's, so they survive the host's restart as a
// disk does, and are removed with it.
//
// Each Docker host has a network namespace of its own (see
// tests/images/dind/Dockerfile for why): its engine's containers on the
// host network (k3s's) share the host's namespace, and hosts reach each
// other and the machine by the addresses of a Network.
type DockerHost struct {
	*SystemdHost
	// Engine is the address of the host's engine from the machine, a
	// DOCKER_HOST value: its socket, in a directory of the machine's
	// mounted into the host.
	Engine string
	// IP is the host's address on its network.
	IP string
}

// engineDir is where the host's engine also listens (engine.conf).
const engineDir = "/run/fleet-role-engine"

// StartDockerHost starts a Docker host and waits for its engine to
// answer; extra are more docker run flags (--network NAME --ip ADDR,
// volumes). A network shared with the machine (--network host) is
// refused.
func StartDockerHost(t testing.TB, extra ...string) *DockerHost {
	t.Helper()
	return StartDockerHostIn(t, t.TempDir(), extra...)
}

// StartDockerHostIn is StartDockerHost with the host's directories (its
// bus, its shared directory) under dir.
func StartDockerHostIn(t T, dir string, extra ...string) *DockerHost {
	t.Helper()
	if err := ownNetwork(extra); err != nil {
		t.Fatal(err)
	}
	RequireImage(t, DockerHostImage)
	// Note: not under dir: a socket's path must fit in 108 bytes, and a
	// test's TempDir can be longer.
	engine, err := os.MkdirTemp("", "dind")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(engine) })
	sd := startSystemd(t, DockerHostImage, dir, append([]string{"-v", engine + ":" + engineDir}, extra...)...)
	h := &DockerHost{SystemdHost: sd, Engine: "unix://" + filepath.Join(engine, "docker.sock")}
	h.waitEngine(t)
	h.IP = strings.TrimSpace(Docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", h.Name))
	if i := strings.IndexByte(h.IP, ' '); i >= 0 {
		h.IP = h.IP[:i]
	}
	return h
}

// ownNetwork refuses the docker run flags that would put a Docker host in
// another's network namespace: the machine's (host) or a container's.
func ownNetwork(args []string) error {
	for i, a := range args {
		var v string
		switch {
		case a == "--network" || a == "--net":
			if i+1 < len(args) {
				v = args[i+1]
			}
		case strings.HasPrefix(a, "--network="), strings.HasPrefix(a, "--net="):
			_, v, _ = strings.Cut(a, "=")
		default:
			continue
		}
		if v == "host" || strings.HasPrefix(v, "container:") {
			return fmt.Errorf("a Docker host needs a network namespace of its own, not %s %s: its engine would take over or delete the docker0 of a shared one (tests/images/dind/Dockerfile)", a, v)
		}
	}
	return nil
}

// waitEngine waits for systemd in the host to run and for the host's
// engine to answer.
func (h *DockerHost) waitEngine(t T) {
	t.Helper()
	h.waitRunning(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := h.docker("version", "--format", "{{.Server.Version}}")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			journal, _ := exec.Command("docker", "exec", h.Name, "journalctl", "--no-pager", "-n", "20", "-u", "docker", "-u", "containerd").CombinedOutput()
			t.Fatalf("the engine of %s does not answer after 60s: %v\n%s", h.Name, err, journal)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Restart restarts the host's container, as the machine booting again,
// and waits for its engine to answer. Its engine's images and containers
// are kept; the engine revives the containers its restart policy says.
func (h *DockerHost) Restart(t T) {
	t.Helper()
	Docker(t, "restart", h.Name)
	h.waitEngine(t)
}

func (h *DockerHost) docker(args ...string) (string, error) {
	out, err := exec.Command("docker", append([]string{"-H", h.Engine}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker -H %s %s: %v: %s", h.Engine, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// Docker runs the docker command against the host's engine and returns
// its trimmed output.
func (h *DockerHost) Docker(t T, args ...string) string {
	t.Helper()
	out, err := h.docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Load copies an image of the machine's engine into the host's engine
// (docker save | docker exec -i HOST docker load: no registry), unless
// the host's engine has it already, the same image ID under that name.
// It reports whether it copied it.
func (h *DockerHost) Load(t T, image string) bool {
	t.Helper()
	id := Docker(t, "image", "inspect", "-f", "{{.Id}}", image)
	if have, err := h.docker("image", "inspect", "-f", "{{.Id}}", image); err == nil && have == id {
		return false
	}
	save := exec.Command("docker", "save", image)
	load := exec.Command("docker", "exec", "-i", h.Name, "docker", "load", "-q")
	var saveErr, loadOut bytes.Buffer
	save.Stderr = &saveErr
	load.Stdout, load.Stderr = &loadOut, &loadOut
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		t.Fatalf("docker save %s: %v", image, err)
	}
	loadErr := load.Run()
	if err := save.Wait(); err != nil {
		t.Fatalf("docker save %s: %v: %s", image, err, bytes.TrimSpace(saveErr.Bytes()))
	}
	if loadErr != nil {
		t.Fatalf("docker load %s into %s: %v: %s", image, h.Name, loadErr, bytes.TrimSpace(loadOut.Bytes()))
	}
	if have := h.Docker(t, "image", "inspect", "-f", "{{.Id}}", image); have != id {
		t.Fatalf("%s in %s is %s after its load, not %s", image, h.Name, have, id)
	}
	return true
}

// Network is a bridge network of the machine's engine, for hosts with
// network namespaces of their own to reach each other and the machine by
// address.
type Network struct {
	Name string
	// Gateway is the machine's address on the network: where the hosts
	// reach a server the test runs on the machine.
	Gateway string
	prefix  string
}

// Addr is the network's address for host number i (2 to 254), to give
// the host with --ip.
func (n *Network) Addr(i int) string { return fmt.Sprintf("%s.%d", n.prefix, i) }

// NewNetwork creates a network on a /24 of 10.78.0.0/16 that no other
// network of the engine holds, and removes it at the test's end (after
// the hosts started later).
func NewNetwork(t T) *Network {
	t.Helper()
	RequireDocker(t)
	var out []byte
	for range 20 {
		prefix := fmt.Sprintf("10.78.%d", 1+mrand.IntN(254))
		name := fmt.Sprintf("fleet-role-test-net-%d-%s", os.Getpid(), prefix[len("10.78."):])
		var err error
		out, err = exec.Command("docker", "network", "create", "--label", Label,
			"--subnet", prefix+".0/24", "--gateway", prefix+".1", name).CombinedOutput()
		if err != nil {
			continue
		}
		t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", name).Run() })
		return &Network{Name: name, Gateway: prefix + ".1", prefix: prefix}
	}
	t.Fatalf("docker network create: no free /24 of 10.78.0.0/16 in 20 tries: %s", bytes.TrimSpace(out))
	return nil
}
