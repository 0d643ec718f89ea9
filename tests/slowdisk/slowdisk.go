// Package slowdisk turns the disk slow for the test process itself, as a
// host's disk turned slow: the process is moved into a blkio cgroup (v1)
// of its own whose writes to the disk under a path are throttled to a few
// a second, as tests/e2e throttles a host container's (Host.SlowDisk);
// every thread of the process then waits on that disk, an embedded etcd's
// fdatasync too. It needs root and the cgroup v1 blkio controller.
package slowdisk

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

const blkio = "/sys/fs/cgroup/blkio"

// Throttle limits the process's writes to the disk under path to iops a
// second until the test ends, when the process goes back to its own
// cgroup and the throttled one is removed.
func Throttle(t testing.TB, path string, iops int) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(blkio, "blkio.throttle.write_iops_device")); err != nil {
		testhost.Unavailable(t, "no cgroup v1 blkio controller at %s (%v): the disk cannot be slowed", blkio, err)
	}
	dev, err := DeviceOf(path)
	if err != nil {
		t.Fatal(err)
	}
	own, err := ownCgroup()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(blkio, fmt.Sprintf("fleet-role-slowdisk-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		testhost.Unavailable(t, "make a blkio cgroup (needs root): %v", err)
	}
	pid := []byte(fmt.Sprintf("%d\n", os.Getpid()))
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(blkio, own, "cgroup.procs"), pid, 0o644); err != nil {
			t.Errorf("move the test process back to blkio cgroup %s: %v", own, err)
			return
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove blkio cgroup %s: %v", dir, err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_iops_device"), []byte(fmt.Sprintf("%s %d\n", dev, iops)), 0o644); err != nil {
		t.Fatalf("throttle %s to %d writes a second: %v", dev, iops, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0o644); err != nil {
		t.Fatalf("move the test process into %s: %v", dir, err)
	}
}

// ownCgroup is the process's blkio cgroup, from /proc/self/cgroup.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "blkio" {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("no blkio cgroup in /proc/self/cgroup")
}

// DeviceOf is the major:minor of the whole disk path is on (the disk of a
// partition), as the blkio controller names it.
func DeviceOf(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", err
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := filepath.Join("/sys/dev/block", dev)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		parent, err := os.ReadFile(filepath.Join(sys, "..", "dev"))
		if err != nil {
			return "", err
		}
		dev = strings.TrimSpace(string(parent))
	}
	return dev, nil
}
