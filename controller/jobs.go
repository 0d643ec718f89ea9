package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api/logkey"
)

// runnerGroup is the actions-runner-controller's API group; a runner pod
// of a runner scale set is owned by an EphemeralRunner of it, whose
// status names the job the runner was given (ARC's
// apis/actions.github.com/v1alpha1 EphemeralRunnerStatus: jobRepositoryName,
// jobDisplayName, workflowRunId; jobId empty while no job is assigned).
const runnerGroup = "actions.github.com"

// jobReread is how long a runner pod whose EphemeralRunner named no job
// (none assigned yet, or it could not be read) is left before it is read
// again; a job, once named, is kept for the pod's life.
const jobReread = 30 * time.Second

// jobs names the GitHub Actions job each runner pod a swap waits on runs,
// read from the pod's EphemeralRunner at the runners steps only, once a
// job is named, and at most every jobReread until then: no request is
// made while no swap waits on runners.
type jobs struct {
	client kubernetes.Interface
	log    *slog.Logger
	mu     sync.Mutex
	known  map[types.UID]job
}

// job is what was read of a runner pod's job, and when.
type job struct {
	name string
	read time.Time
}

func newJobs(client kubernetes.Interface, log *slog.Logger) *jobs {
	return &jobs{client: client, log: log, known: map[types.UID]job{}}
}

// ephemeralRunner is what is read of an EphemeralRunner.
type ephemeralRunner struct {
	Status struct {
		Phase             string `json:"phase"`
		JobID             string `json:"jobId"`
		JobRepositoryName string `json:"jobRepositoryName"`
		JobDisplayName    string `json:"jobDisplayName"`
		WorkflowRunID     int64  `json:"workflowRunId"`
	} `json:"status"`
}

// jobName says which job the runner's status names: "owner/repo: job
// (run N)"; empty while it has none.
func (r ephemeralRunner) jobName() string {
	s := r.Status
	if s.JobID == "" && s.JobDisplayName == "" {
		return ""
	}
	name := cmp.Or(s.JobDisplayName, "job "+s.JobID)
	if s.JobRepositoryName != "" {
		name = s.JobRepositoryName + ": " + name
	}
	if s.WorkflowRunID != 0 {
		name += fmt.Sprintf(" (run %d)", s.WorkflowRunID)
	}
	return name
}

// of names the job of each pod given that an EphemeralRunner owns, by
// namespace/name; pods without one, or whose runner names no job, are
// left out. Pods no longer given are forgotten.
func (j *jobs) of(ctx context.Context, pods []*corev1.Pod, now time.Time) map[string]string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]string{}
	seen := map[types.UID]bool{}
	for _, p := range pods {
		owner := runnerOwner(p)
		if owner == nil {
			continue
		}
		seen[p.UID] = true
		k, ok := j.known[p.UID]
		if !ok || (k.name == "" && now.Sub(k.read) >= jobReread) {
			k = job{name: j.read(ctx, p.Namespace, owner), read: now}
			j.known[p.UID] = k
		}
		if k.name != "" {
			out[p.Namespace+"/"+p.Name] = k.name
		}
	}
	for uid := range j.known {
		if !seen[uid] {
			delete(j.known, uid)
		}
	}
	return out
}

// runnerRef names a pod's EphemeralRunner.
type runnerRef struct {
	gv   schema.GroupVersion
	name string
}

// runnerOwner is the pod's owning EphemeralRunner, if any.
func runnerOwner(p *corev1.Pod) *runnerRef {
	for _, o := range p.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err == nil && gv.Group == runnerGroup && o.Kind == "EphemeralRunner" {
			return &runnerRef{gv: gv, name: o.Name}
		}
	}
	return nil
}

// read reads the EphemeralRunner named and says which job it runs; empty,
// and logged, when it cannot be read: a job's name is news for a person,
// never a reason to hold a swap.
func (j *jobs) read(ctx context.Context, ns string, owner *runnerRef) string {
	rc := j.client.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	path := strings.Join([]string{"/apis", owner.gv.Group, owner.gv.Version, "namespaces", ns, "ephemeralrunners", owner.name}, "/")
	raw, err := rc.Get().AbsPath(path).DoRaw(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		j.log.Warn("the job of a runner pod cannot be read from its EphemeralRunner", logkey.Err, err, logkey.Runner, ns+"/"+owner.name)
		return ""
	}
	var r ephemeralRunner
	if err := json.Unmarshal(raw, &r); err != nil {
		j.log.Warn("the job of a runner pod cannot be read from its EphemeralRunner", logkey.Err, err, logkey.Runner, ns+"/"+owner.name)
		return ""
	}
	return r.jobName()
}
