package deployment

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// ServiceAccountDir is where a Pod's container finds its ServiceAccount's
// token, the API server's CA and its namespace (client-go's in-cluster
// configuration reads them there).
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// TokenSeconds is the lifetime of the token a replica is given: that of
// the kube-api-access volume the ServiceAccount admission plugin adds to
// a Pod (kubernetes: plugin/pkg/admission/serviceaccount, 3607 s).
const TokenSeconds = 3607

// supported says which parts of the pod template the stand-in cannot run
// as the kubelet would; nil when it can run it. What it leaves out on
// purpose (scheduling, requests, liveness) is in the package's doc.
func supported(tpl *corev1.PodTemplateSpec) error {
	s := &tpl.Spec
	var errs []error
	no := func(field string) { errs = append(errs, fmt.Errorf("%s is not supported by the stand-in", field)) }
	if len(s.Containers) != 1 {
		errs = append(errs, fmt.Errorf("spec.containers: %d containers; the stand-in runs one", len(s.Containers)))
	}
	if len(s.InitContainers) > 0 {
		no("spec.initContainers")
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		no("spec.hostNetwork, hostPID and hostIPC")
	}
	if s.RestartPolicy != "" && s.RestartPolicy != corev1.RestartPolicyAlways {
		no("spec.restartPolicy " + string(s.RestartPolicy))
	}
	if sc := s.SecurityContext; sc != nil {
		if sc.FSGroup != nil || len(sc.SupplementalGroups) > 0 || len(sc.Sysctls) > 0 {
			no("spec.securityContext's fsGroup, supplementalGroups and sysctls")
		}
	}
	for _, v := range s.Volumes {
		if v.ConfigMap == nil {
			no("spec.volumes[" + v.Name + "]: a volume other than a configMap")
		}
	}
	for _, c := range s.Containers {
		f := "spec.containers[" + c.Name + "]"
		if c.ImagePullPolicy == corev1.PullAlways {
			no(f + ".imagePullPolicy Always (there is no registry)")
		}
		if len(c.EnvFrom) > 0 {
			no(f + ".envFrom")
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				no(f + ".env[" + e.Name + "].valueFrom")
			}
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				no(f + ".ports[].hostPort")
			}
		}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				no(f + ".volumeMounts[" + m.Name + "].subPath")
			}
			if !slices.ContainsFunc(s.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				errs = append(errs, fmt.Errorf("%s.volumeMounts[%s]: no such volume", f, m.Name))
			}
		}
		if c.Lifecycle != nil {
			no(f + ".lifecycle")
		}
		if p := c.ReadinessProbe; p != nil && p.HTTPGet == nil {
			no(f + ".readinessProbe other than httpGet")
		}
		if sc := c.SecurityContext; sc != nil {
			if ptr.Deref(sc.Privileged, false) {
				no(f + ".securityContext.privileged")
			}
			if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost {
				no(f + ".securityContext.seccompProfile Localhost")
			}
		}
	}
	return errors.Join(errs...)
}

// podDirs are the directories of the machine holding a replica's
// volumes, by volume name, and its ServiceAccount's files ("" for none).
type podDirs struct {
	volumes        map[string]string
	serviceAccount string
}

// apiServer is where a Pod reaches the API server: the kubernetes
// Service's address, as the kubelet gives it in the environment.
type apiServer struct {
	host string
	port int
}

// containerConfig is the container the kubelet would run for the
// template's container, as Docker's configuration: the image and its
// command and arguments (a command replaces the image's entrypoint and
// its arguments its cmd), the environment (the kubernetes Service's
// variables, then the container's own, which win), the working
// directory, the user and group (the container's securityContext over
// the pod's), a read-only root, no privilege escalation, the capabilities
// and seccomp profile, the memory and cpu limits, the volumes read-only
// at their mount paths and the ServiceAccount's files, the restart policy
// (Always), the grace period as the stop timeout, and the pod's name as
// its hostname, on the network given. kubernetes: pkg/kubelet/kuberuntime
// (kuberuntime_container.go, generateContainerConfig;
// kuberuntime_container_linux.go, generateLinuxContainerConfig),
// pkg/kubelet/kubelet_pods.go (makeEnvironmentVariables,
// makeMounts), pkg/kubelet/envvars (FromServices).
func containerConfig(tpl *corev1.PodTemplateSpec, pod, netName string, api apiServer, dirs podDirs, labels map[string]string) (*container.Config, *container.HostConfig, *network.NetworkingConfig, error) {
	if err := supported(tpl); err != nil {
		return nil, nil, nil, err
	}
	c := tpl.Spec.Containers[0]
	env := map[string]string{}
	if api.host != "" {
		hp := net.JoinHostPort(api.host, strconv.Itoa(api.port))
		env["KUBERNETES_SERVICE_HOST"] = api.host
		env["KUBERNETES_SERVICE_PORT"] = strconv.Itoa(api.port)
		env["KUBERNETES_SERVICE_PORT_HTTPS"] = strconv.Itoa(api.port)
		env["KUBERNETES_PORT"] = "tcp://" + hp
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	var envList []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}

	user, err := userOf(tpl.Spec.SecurityContext, c.SecurityContext)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg := &container.Config{
		Image:      c.Image,
		Cmd:        c.Args,
		Env:        envList,
		WorkingDir: c.WorkingDir,
		User:       user,
		Hostname:   pod,
		Labels:     labels,
	}
	if len(c.Command) > 0 {
		cfg.Entrypoint = c.Command
	}
	if g := tpl.Spec.TerminationGracePeriodSeconds; g != nil {
		cfg.StopTimeout = ptr.To(int(*g))
	} else {
		cfg.StopTimeout = ptr.To(int(corev1.DefaultTerminationGracePeriodSeconds))
	}

	host := &container.HostConfig{
		NetworkMode:   container.NetworkMode(netName),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyAlways},
	}
	if sc := c.SecurityContext; sc != nil {
		host.ReadonlyRootfs = ptr.Deref(sc.ReadOnlyRootFilesystem, false)
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			host.SecurityOpt = append(host.SecurityOpt, "no-new-privileges:true")
		}
		if caps := sc.Capabilities; caps != nil {
			for _, a := range caps.Add {
				host.CapAdd = append(host.CapAdd, string(a))
			}
			for _, d := range caps.Drop {
				host.CapDrop = append(host.CapDrop, string(d))
			}
		}
	}
	if seccompOf(tpl.Spec.SecurityContext, c.SecurityContext) == corev1.SeccompProfileTypeUnconfined {
		host.SecurityOpt = append(host.SecurityOpt, "seccomp=unconfined")
	}
	if m, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		host.Memory = m.Value()
	}
	if cpu, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		host.NanoCPUs = cpu.MilliValue() * 1e6
	}
	for _, m := range c.VolumeMounts {
		dir, ok := dirs.volumes[m.Name]
		if !ok {
			return nil, nil, nil, fmt.Errorf("volume %s: no directory", m.Name)
		}
		// A configMap volume is read-only, whatever the mount says.
		host.Binds = append(host.Binds, dir+":"+m.MountPath+":ro")
	}
	if dirs.serviceAccount != "" {
		host.Binds = append(host.Binds, dirs.serviceAccount+":"+ServiceAccountDir+":ro")
	}
	nc := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {}}}
	return cfg, host, nc, nil
}

// userOf is Docker's user of the container: runAsUser and runAsGroup, the
// container's over the pod's; "" leaves the image's. runAsNonRoot with
// user 0 is refused, as the kubelet refuses to start it.
func userOf(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) (string, error) {
	var uid, gid *int64
	var nonRoot *bool
	if pod != nil {
		uid, gid, nonRoot = pod.RunAsUser, pod.RunAsGroup, pod.RunAsNonRoot
	}
	if c != nil {
		if c.RunAsUser != nil {
			uid = c.RunAsUser
		}
		if c.RunAsGroup != nil {
			gid = c.RunAsGroup
		}
		if c.RunAsNonRoot != nil {
			nonRoot = c.RunAsNonRoot
		}
	}
	switch {
	case uid == nil && gid != nil:
		return "", errors.New("runAsGroup without runAsUser is not supported by the stand-in")
	case uid == nil && ptr.Deref(nonRoot, false):
		return "", errors.New("runAsNonRoot without runAsUser is not supported by the stand-in")
	case uid == nil:
		return "", nil
	case *uid == 0 && ptr.Deref(nonRoot, false):
		return "", errors.New("container's runAsUser breaks non-root policy (runAsNonRoot and runAsUser 0)")
	case gid != nil:
		return fmt.Sprintf("%d:%d", *uid, *gid), nil
	}
	return strconv.FormatInt(*uid, 10), nil
}

func seccompOf(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) corev1.SeccompProfileType {
	if c != nil && c.SeccompProfile != nil {
		return c.SeccompProfile.Type
	}
	if pod != nil && pod.SeccompProfile != nil {
		return pod.SeccompProfile.Type
	}
	return corev1.SeccompProfileTypeRuntimeDefault
}

// writeAtomically puts files (a path relative to dir to its content and
// mode) into dir as the kubelet's AtomicWriter does for configMap,
// secret and projected volumes, so that a reader sees the old files or
// the new ones, never a mix: they go into a new timestamped directory
// "..2006_01_02_15_04_05.NNN", a link "..data_tmp" to it is renamed over
// "..data", each file's path is a link into "..data", and the old
// directory and the links of files no longer there are removed.
// kubernetes: pkg/volume/util/atomic_writer.go, (*AtomicWriter).Write.
func writeAtomically(dir string, files map[string]fileData) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const data = "..data"
	oldTs, _ := os.Readlink(filepath.Join(dir, data))
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for name, f := range files {
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, data)); err != nil {
		return err
	}
	tops := map[string]bool{}
	for name := range files {
		tops[strings.SplitN(name, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !tops[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for top := range tops {
		link := filepath.Join(dir, top)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(data, top) {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(data, top), link); err != nil {
			return err
		}
	}
	if oldTs != "" && oldTs != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, oldTs))
	}
	return nil
}

// fileData is a file of a volume.
type fileData struct {
	data []byte
	mode os.FileMode
}

// configMapFiles are the files of a configMap volume: a file per key (or
// per item, at its path), with the volume's defaultMode (0644) or the
// item's mode. kubernetes: pkg/volume/configmap, MakePayload.
func configMapFiles(src *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap) (map[string]fileData, error) {
	mode := os.FileMode(ptr.Deref(src.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode))
	content := func(key string) ([]byte, bool) {
		if v, ok := cm.Data[key]; ok {
			return []byte(v), true
		}
		v, ok := cm.BinaryData[key]
		return v, ok
	}
	files := map[string]fileData{}
	if len(src.Items) == 0 {
		for k := range cm.Data {
			files[k] = fileData{[]byte(cm.Data[k]), mode}
		}
		for k, v := range cm.BinaryData {
			files[k] = fileData{v, mode}
		}
		return files, nil
	}
	for _, it := range src.Items {
		b, ok := content(it.Key)
		if !ok {
			if ptr.Deref(src.Optional, false) {
				continue
			}
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		files[it.Path] = fileData{b, m}
	}
	return files, nil
}
