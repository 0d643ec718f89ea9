// Package deployment stands in for Kubernetes' Deployment controller and
// a kubelet, for one Deployment, in the suites that run the real
// kube-apiserver alone (tests/kubeapi) and need a Deployment applied to
// it to run as it would in a cluster: it runs the Deployment's replicas
// as containers of the machine's Docker engine, as their pod template
// says, rolls them when the template changes, and writes the
// Deployment's status. What it copies, and from where (kubernetes
// v1.37):
//
// The Deployment controller (pkg/controller/deployment):
//   - A revision per pod template, named by its hash (TemplateHash, as
//     ComputeHash), whose replicas stand for its ReplicaSet
//     (<deployment>-<hash>), each named <deployment>-<hash>-<5 random>
//     as the ReplicaSet controller names its Pods.
//   - The rolling update (rolling, as rolloutRolling): maxSurge and
//     maxUnavailable resolved as ResolveFenceposts; the current
//     revision scaled up to desired+maxSurge in all, then the earlier
//     revisions scaled down, their unavailable replicas first, keeping
//     desired-maxUnavailable available; the replicas stopped in a
//     ReplicaSet's deletion order (ActivePods). The Recreate strategy
//     (recreate): the old replicas stopped before the new ones start.
//     A paused Deployment is not rolled.
//   - The status (writeStatus, as calculateStatus and
//     syncRolloutStatus): observedGeneration, replicas, updatedReplicas,
//     readyReplicas, availableReplicas (ready for minReadySeconds),
//     unavailableReplicas; the Available condition
//     (MinimumReplicasAvailable once desired-maxUnavailable are
//     available, else MinimumReplicasUnavailable) and the Progressing
//     one (ReplicaSetUpdated while it rolls, NewReplicaSetAvailable once
//     complete); written when it changed.
//
// The kubelet (pkg/kubelet):
//   - A container per replica from the template's container
//     (containerConfig): image, command, args, env, working directory,
//     user and group, read-only root, no privilege escalation,
//     capabilities, seccomp, memory and cpu limits, the grace period as
//     the stop timeout; restartPolicy Always as Docker's restart policy;
//     the Pod's name as its hostname; on a Docker network of the
//     machine, reached at its own address as a Pod at its IP.
//   - configMap volumes (configMapFiles) written as the kubelet's
//     AtomicWriter writes them (writeAtomically), mounted read-only at
//     the volumeMount's path, and written again when the ConfigMap
//     changes (the kubelet: within its sync period; here every
//     Options.VolumeSync).
//   - The ServiceAccount's token, as the kube-api-access volume gives it:
//     a token for the template's serviceAccountName by TokenRequest
//     (TokenSeconds), renewed once 80% of its life passed (the token
//     manager's requiresRefresh), with the API server's ca.crt and the
//     namespace, at ServiceAccountDir; and the kubernetes Service's
//     KUBERNETES_SERVICE_HOST and _PORT (Options.APIHost, APIPort), so
//     that client-go's in-cluster configuration works as in a Pod.
//   - Readiness (pkg/kubelet/prober): the readinessProbe's httpGet (path,
//     port by number or name, scheme, headers, timeoutSeconds, a status
//     from 200 to 399), after initialDelaySeconds, with its
//     successThreshold and failureThreshold; a container with none is
//     ready while it runs; a container not running is not ready.
//
// Not copied: ReplicaSet and Pod objects (the replicas exist as
// containers only: no Pod of theirs is listed, drained or evicted), the
// scheduler (nodeSelector, affinity, tolerations, priorityClassName have
// no effect), liveness and startup probes, resource requests, a probe's
// periodSeconds (each replica is probed every Options.Sync), the
// progress deadline's timeout, revision history and rollbacks, the
// revision annotation. What the stand-in cannot run as the kubelet would
// (more than one container, init containers, volumes other than
// configMaps, valueFrom, hostPort, imagePullPolicy Always, ...) is an
// error (Err), never ignored.
package deployment

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Options say which Deployment to run and where.
type Options struct {
	// Client acts for the Deployment controller and the kubelet: it reads
	// the Deployment and its ConfigMaps, asks tokens for its
	// ServiceAccount and writes its status.
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Network is the machine's Docker network the replicas join.
	Network string
	// APIHost and APIPort are where the replicas reach the API server.
	APIHost string
	APIPort int
	// CA is the API server's CA, the replicas' ca.crt.
	CA []byte
	// Dir keeps each replica's volumes and, once it is stopped, its logs.
	Dir string
	// Sync is how often the Deployment is looked at and the replicas
	// probed (default 500ms); VolumeSync how often their ConfigMaps are
	// read again (default 5s).
	Sync, VolumeSync time.Duration
	// Log, when set, gets what the stand-in does.
	Log func(format string, args ...any)
	// NodeImages, when set, says why the nodes do not hold an image: the
	// stand-in starts a replica only once every node its Pod may be
	// scheduled on holds the image (it has no scheduler: every one), as a
	// kubelet with imagePullPolicy IfNotPresent and no registry to pull
	// from fails the Pod with ErrImagePull (kubernetes:
	// pkg/kubelet/images, (*imageManager).EnsureImageExists). nil: the
	// machine's engine is the only store.
	NodeImages func(ctx context.Context, image string) error
}

// Replica is a replica the stand-in runs or ran.
type Replica struct {
	// Pod is its name, <deployment>-<hash>-<suffix>, its hostname.
	Pod string
	// Hash names its revision (TemplateHash).
	Hash string
	// Container is its container's ID; IP its address on the network.
	Container string
	IP        string
	Running   bool
	Ready     bool
	Restarts  int
	Created   time.Time
}

// Runner runs one Deployment's replicas.
type Runner struct {
	o      Options
	docker *client.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	pods    []*pod
	stopped []Replica
	err     error
}

// pod is a running replica and what the kubelet keeps of it.
type pod struct {
	Replica
	tpl        *corev1.PodTemplateSpec
	dir        string
	readySince time.Time
	successes  int
	failures   int
	// configMaps are the resourceVersions of the ConfigMaps written into
	// its volumes, by volume; volumesAt when they were last read.
	configMaps map[string]string
	volumesAt  time.Time
	// tokenIssued and tokenExpires are its token's.
	tokenIssued, tokenExpires time.Time
}

// Start starts running the Deployment, as soon as it exists, until the
// test's end, when its replicas are stopped and their containers
// removed.
func Start(t testhost.T, o Options) *Runner {
	t.Helper()
	testhost.RequireDocker(t)
	if o.Sync <= 0 {
		o.Sync = 500 * time.Millisecond
	}
	if o.VolumeSync <= 0 {
		o.VolumeSync = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{o: o, docker: dc, cancel: cancel, done: make(chan struct{})}
	go r.loop(ctx)
	t.Cleanup(r.Stop)
	return r
}

func (r *Runner) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.o.Sync)
	defer t.Stop()
	var told string
	for {
		err := r.sync(ctx)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		if msg := fmt.Sprint(err); err != nil && msg != told {
			r.o.Log("deployment stand-in: %s/%s: %v", r.o.Namespace, r.o.Name, err)
			told = msg
		} else if err == nil {
			told = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop stops the stand-in and every replica, keeping their logs in Dir.
func (r *Runner) Stop() {
	r.cancel()
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.mu.Lock()
	pods := slices.Clone(r.pods)
	r.mu.Unlock()
	for _, p := range pods {
		_ = r.stopPod(ctx, p)
	}
	_ = r.docker.Close()
}

// Replicas are the replicas running now, oldest first.
func (r *Runner) Replicas() []Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Replica
	for _, p := range r.pods {
		out = append(out, p.Replica)
	}
	return out
}

// Stopped are the replicas stopped so far, in the order they were.
func (r *Runner) Stopped() []Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stopped)
}

// Err is the last look's error: why the stand-in cannot run the
// Deployment as it is, or could not reach the API server or the engine.
func (r *Runner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Logs are a replica's logs, running or stopped.
func (r *Runner) Logs(podName string) string {
	r.mu.Lock()
	var id string
	for _, p := range r.pods {
		if p.Pod == podName {
			id = p.Container
		}
	}
	r.mu.Unlock()
	if id == "" {
		b, _ := os.ReadFile(filepath.Join(r.o.Dir, podName+".log"))
		return string(b)
	}
	return r.logs(context.Background(), id)
}

func (r *Runner) logs(ctx context.Context, id string) string {
	rc, err := r.docker.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = stdcopy.StdCopy(&b, &b, rc)
	return b.String()
}

// sync is one look: the Deployment, its replicas, a step of its rollout,
// its status.
func (r *Runner) sync(ctx context.Context) error {
	d, err := r.o.Client.AppsV1().Deployments(r.o.Namespace).Get(ctx, r.o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the deployment: %w", err)
	}
	if err := supported(&d.Spec.Template); err != nil {
		return err
	}
	hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	now := time.Now()
	r.mu.Lock()
	pods := slices.Clone(r.pods)
	r.mu.Unlock()
	var errs []error
	for _, p := range pods {
		errs = append(errs, r.refresh(ctx, p, now))
	}
	desired := int(ptr.Deref(d.Spec.Replicas, 1))
	var newer, older []member
	for _, p := range pods {
		r.mu.Lock()
		m := member{name: p.Pod, created: p.Created, ready: p.Ready, readySince: p.readySince,
			available: p.Ready && !now.Before(p.readySince.Add(time.Duration(d.Spec.MinReadySeconds)*time.Second))}
		r.mu.Unlock()
		if p.Hash == hash {
			newer = append(newer, m)
		} else {
			older = append(older, m)
		}
	}
	var start int
	var stop []string
	switch {
	case d.Spec.Paused:
	case d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType:
		start, stop = recreate(desired, newer, older)
	default:
		surge, unavailable, err := fenceposts(d.Spec.Strategy.RollingUpdate, desired)
		if err != nil {
			return fmt.Errorf("the rolling update's fenceposts: %w", err)
		}
		start, stop = rolling(desired, surge, unavailable, newer, older)
	}
	for _, name := range stop {
		if i := slices.IndexFunc(pods, func(p *pod) bool { return p.Pod == name }); i >= 0 {
			errs = append(errs, r.stopPod(ctx, pods[i]))
		}
	}
	for range start {
		if err := r.startPod(ctx, d, hash); err != nil {
			errs = append(errs, err)
			break
		}
	}
	errs = append(errs, r.writeStatus(ctx, d, hash))
	return errors.Join(errs...)
}

// startPod starts a replica of the current revision: its volumes, its
// token, its container.
func (r *Runner) startPod(ctx context.Context, d *appsv1.Deployment, hash string) error {
	if r.o.NodeImages != nil {
		image := d.Spec.Template.Spec.Containers[0].Image
		if err := r.o.NodeImages(ctx, image); err != nil {
			return fmt.Errorf("ErrImagePull: %s: %w", image, err)
		}
	}
	tpl := d.Spec.Template.DeepCopy()
	name := fmt.Sprintf("%s-%s-%s", d.Name, hash, rand.String(5))
	p := &pod{Replica: Replica{Pod: name, Hash: hash}, tpl: tpl, dir: filepath.Join(r.o.Dir, name), configMaps: map[string]string{}}
	dirs := podDirs{volumes: map[string]string{}}
	for _, v := range tpl.Spec.Volumes {
		dirs.volumes[v.Name] = filepath.Join(p.dir, "volumes", v.Name)
	}
	if err := r.writeVolumes(ctx, p); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ptr.Deref(tpl.Spec.AutomountServiceAccountToken, true) {
		dirs.serviceAccount = filepath.Join(p.dir, "serviceaccount")
		if err := r.writeToken(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	labels := map[string]string{}
	k, v, _ := strings.Cut(testhost.Label, "=")
	labels[k] = v
	labels["io.kubernetes.pod.name"] = name
	labels["io.kubernetes.pod.namespace"] = r.o.Namespace
	cfg, host, nc, err := containerConfig(tpl, name, r.o.Network, apiServer{host: r.o.APIHost, port: r.o.APIPort}, dirs, labels)
	if err != nil {
		return err
	}
	if _, err := r.docker.ImageInspect(ctx, cfg.Image); err != nil {
		return fmt.Errorf("%s: ErrImageNeverPull: image %s is not present on the machine (no registry): %w", name, cfg.Image, err)
	}
	created, err := r.docker.ContainerCreate(ctx, cfg, host, nc, nil, containerName(name))
	if err != nil {
		return fmt.Errorf("%s: create its container: %w", name, err)
	}
	p.Container, p.Created = created.ID, time.Now()
	r.mu.Lock()
	r.pods = append(r.pods, p)
	r.mu.Unlock()
	if err := r.docker.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("%s: start its container: %w", name, err)
	}
	r.o.Log("deployment stand-in: started %s (revision %s)", name, hash)
	return nil
}

// containerName is a replica's container's name on the machine's engine,
// the process's id in it so that tests running at once do not clash.
func containerName(pod string) string {
	return fmt.Sprintf("fleet-role-test-%d-%s", os.Getpid(), pod)
}

// writeVolumes writes the replica's configMap volumes whose ConfigMap
// changed since it last did.
func (r *Runner) writeVolumes(ctx context.Context, p *pod) error {
	for _, v := range p.tpl.Spec.Volumes {
		src := v.ConfigMap
		cm, err := r.o.Client.CoreV1().ConfigMaps(r.o.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && ptr.Deref(src.Optional, false):
			cm = &corev1.ConfigMap{}
		case err != nil:
			return fmt.Errorf("volume %s: configmap %q: %w", v.Name, src.Name, err)
		}
		if p.configMaps[v.Name] == cm.ResourceVersion && cm.ResourceVersion != "" {
			continue
		}
		files, err := configMapFiles(src, cm)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := writeAtomically(filepath.Join(p.dir, "volumes", v.Name), files); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if p.configMaps[v.Name] != "" {
			r.o.Log("deployment stand-in: %s: volume %s updated to configmap %s's resourceVersion %s", p.Pod, v.Name, src.Name, cm.ResourceVersion)
		}
		p.configMaps[v.Name] = cm.ResourceVersion
	}
	p.volumesAt = time.Now()
	return nil
}

// writeToken asks a token for the replica's ServiceAccount and writes it
// beside the CA and the namespace.
func (r *Runner) writeToken(ctx context.Context, p *pod) error {
	sa := p.tpl.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := r.o.Client.CoreV1().ServiceAccounts(r.o.Namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](TokenSeconds)}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for the serviceaccount %s/%s: %w", r.o.Namespace, sa, err)
	}
	files := map[string]fileData{
		"token":     {[]byte(tr.Status.Token), 0o644},
		"ca.crt":    {r.o.CA, 0o644},
		"namespace": {[]byte(r.o.Namespace), 0o644},
	}
	if err := writeAtomically(filepath.Join(p.dir, "serviceaccount"), files); err != nil {
		return err
	}
	p.tokenIssued, p.tokenExpires = time.Now(), tr.Status.ExpirationTimestamp.Time
	return nil
}

// refresh looks at a replica's container, writes its volumes and token
// again when due, and probes its readiness.
func (r *Runner) refresh(ctx context.Context, p *pod, now time.Time) error {
	var errs []error
	if now.Sub(p.volumesAt) >= r.o.VolumeSync {
		errs = append(errs, r.writeVolumes(ctx, p))
	}
	if !p.tokenExpires.IsZero() && now.After(p.tokenIssued.Add(p.tokenExpires.Sub(p.tokenIssued)*8/10)) {
		errs = append(errs, r.writeToken(ctx, p))
	}
	ins, err := r.docker.ContainerInspect(ctx, p.Container)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("%s: inspect its container: %w", p.Pod, err))...)
	}
	running := ins.State != nil && ins.State.Running && !ins.State.Restarting
	ip := ""
	if ins.NetworkSettings != nil {
		if ep := ins.NetworkSettings.Networks[r.o.Network]; ep != nil {
			ip = ep.IPAddress
		}
	}
	ready := false
	c := p.tpl.Spec.Containers[0]
	switch probe := c.ReadinessProbe; {
	case !running:
		p.successes, p.failures = 0, 0
	case probe == nil:
		ready = true
	case now.Before(p.Created.Add(time.Duration(probe.InitialDelaySeconds) * time.Second)):
	default:
		if err := httpProbe(ctx, probe, c, ip); err == nil {
			p.successes, p.failures = p.successes+1, 0
		} else {
			p.successes, p.failures = 0, p.failures+1
		}
		success := max(int(probe.SuccessThreshold), 1)
		failure := max(int(probe.FailureThreshold), 1)
		if probe.FailureThreshold == 0 {
			failure = 3
		}
		ready = p.Ready && p.failures < failure || !p.Ready && p.successes >= success
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready && !p.Ready {
		p.readySince = now
	}
	p.Running, p.Ready, p.IP, p.Restarts = running, ready, ip, ins.RestartCount
	return errors.Join(errs...)
}

// httpProbe is the kubelet's HTTP probe: a GET of the path at the port
// (a number, or a container port's name), with the headers, within the
// timeout (1s by default), successful with a status from 200 to 399. An
// HTTPS probe does not verify the certificate. kubernetes:
// pkg/kubelet/prober/prober.go and pkg/probe/http.
func httpProbe(ctx context.Context, probe *corev1.Probe, c corev1.Container, ip string) error {
	g := probe.HTTPGet
	if ip == "" {
		return errors.New("no address")
	}
	port := g.Port.IntValue()
	if g.Port.Type == intstr.String {
		port = 0
		for _, p := range c.Ports {
			if p.Name == g.Port.StrVal {
				port = int(p.ContainerPort)
			}
		}
		if port == 0 {
			return fmt.Errorf("no port named %q", g.Port.StrVal)
		}
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(ip, strconv.Itoa(port))+g.Path, nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// Note: as the kubelet's, an HTTPS probe trusts any certificate.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

// stopPod stops a replica as the kubelet stops a deleted Pod's
// container (its grace period, then a kill), keeps its logs in Dir and
// removes its container and volumes.
func (r *Runner) stopPod(ctx context.Context, p *pod) error {
	grace := int(ptr.Deref(p.tpl.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds))
	err := r.docker.ContainerStop(ctx, p.Container, container.StopOptions{Timeout: &grace})
	_ = os.WriteFile(filepath.Join(r.o.Dir, p.Pod+".log"), []byte(r.logs(ctx, p.Container)), 0o644)
	if rmErr := r.docker.ContainerRemove(ctx, p.Container, container.RemoveOptions{Force: true, RemoveVolumes: true}); rmErr != nil && err == nil {
		err = rmErr
	}
	_ = os.RemoveAll(p.dir)
	r.mu.Lock()
	r.pods = slices.DeleteFunc(r.pods, func(q *pod) bool { return q == p })
	p.Running, p.Ready = false, false
	r.stopped = append(r.stopped, p.Replica)
	r.mu.Unlock()
	r.o.Log("deployment stand-in: stopped %s (revision %s)", p.Pod, p.Hash)
	if err != nil {
		return fmt.Errorf("%s: stop its container: %w", p.Pod, err)
	}
	return nil
}

// writeStatus writes the Deployment's status as the Deployment
// controller computes it, when it changed. kubernetes:
// pkg/controller/deployment/sync.go, calculateStatus, and progress.go,
// syncRolloutStatus.
func (r *Runner) writeStatus(ctx context.Context, d *appsv1.Deployment, hash string) error {
	r.mu.Lock()
	var all, updated, ready, available int32
	now := time.Now()
	for _, p := range r.pods {
		all++
		if p.Hash == hash {
			updated++
		}
		if p.Ready {
			ready++
			if !now.Before(p.readySince.Add(time.Duration(d.Spec.MinReadySeconds) * time.Second)) {
				available++
			}
		}
	}
	r.mu.Unlock()
	desired := ptr.Deref(d.Spec.Replicas, 1)
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            all,
		UpdatedReplicas:     updated,
		ReadyReplicas:       ready,
		AvailableReplicas:   available,
		UnavailableReplicas: max(all-available, 0),
		CollisionCount:      d.Status.CollisionCount,
		Conditions:          slices.Clone(d.Status.Conditions),
	}
	maxUnavailable := int32(0)
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType && desired > 0 {
		_, u, err := fenceposts(d.Spec.Strategy.RollingUpdate, int(desired))
		if err != nil {
			return err
		}
		maxUnavailable = int32(u)
	}
	if available >= desired-maxUnavailable {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability.")
	} else {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
	}
	rs := d.Name + "-" + hash
	progressing := condition(d.Status, appsv1.DeploymentProgressing)
	complete := st.UpdatedReplicas == desired && st.Replicas == desired && st.AvailableReplicas == desired
	switch {
	case d.Spec.ProgressDeadlineSeconds == nil:
		st.Conditions = slices.DeleteFunc(st.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == appsv1.DeploymentProgressing })
	case st.Replicas == st.UpdatedReplicas && progressing != nil && progressing.Reason == "NewReplicaSetAvailable":
	case complete:
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable", fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs))
	case st.UpdatedReplicas > d.Status.UpdatedReplicas || st.Replicas-st.UpdatedReplicas < d.Status.Replicas-d.Status.UpdatedReplicas ||
		st.ReadyReplicas > d.Status.ReadyReplicas || st.AvailableReplicas > d.Status.AvailableReplicas:
		c := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
			Message: fmt.Sprintf("ReplicaSet %q is progressing.", rs), LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}
		if progressing != nil && progressing.Status == corev1.ConditionTrue {
			c.LastTransitionTime = progressing.LastTransitionTime
		}
		st.Conditions = append(slices.DeleteFunc(st.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == appsv1.DeploymentProgressing }), c)
	}
	if equalStatus(d.Status, st) {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := r.o.Client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Generation != d.Generation {
			return nil // the next look computes it for the new spec
		}
		cur.Status = st
		_, err = r.o.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("write the deployment's status: %w", err)
		}
		return nil
	})
}

// equalStatus compares statuses as the API server stores them: times to
// the second.
func equalStatus(a, b appsv1.DeploymentStatus) bool {
	norm := func(s appsv1.DeploymentStatus) appsv1.DeploymentStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			c := &s.Conditions[i]
			c.LastUpdateTime = metav1.NewTime(c.LastUpdateTime.Truncate(time.Second))
			c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Truncate(time.Second))
		}
		return s
	}
	x, y := norm(a), norm(b)
	return x.String() == y.String()
}

func condition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition sets a condition unless one of the same status and reason
// is there, keeping its transition time when the status is the same.
// kubernetes: pkg/controller/deployment/util, SetDeploymentCondition.
func setCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, msg string) {
	cur := condition(*st, t)
	if cur != nil && cur.Status == status && cur.Reason == reason {
		return
	}
	c := appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: msg, LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	if cur != nil && cur.Status == status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	st.Conditions = append(slices.DeleteFunc(st.Conditions, func(x appsv1.DeploymentCondition) bool { return x.Type == t }), c)
}
