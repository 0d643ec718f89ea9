package adapt

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Input is the cluster as read: every Node, the kubelets' Leases, the
// regrade Lease, the status ConfigMap and the Pods.
type Input struct {
	Nodes      []*corev1.Node
	NodeLeases []*coordinationv1.Lease
	Lease      *coordinationv1.Lease
	Status     *corev1.ConfigMap
	Pods       []*corev1.Pod
}

// Build converts the input into a snapshot at now. Every malformed object
// or annotation is reported in the joined error; the snapshot is still
// built, without the parts that could not be read.
func Build(in Input, cfg swapplan.Config, runners labels.Selector, now time.Time) (swapplan.Snapshot, error) {
	var errs []error
	s := swapplan.Snapshot{Now: now, Config: cfg}

	heartbeats := make(map[string]time.Time, len(in.NodeLeases))
	for _, l := range in.NodeLeases {
		if l.Spec.RenewTime != nil {
			heartbeats[l.Name] = l.Spec.RenewTime.Time
		}
	}
	pods := make(map[string][]swapplan.Pod)
	for _, p := range in.Pods {
		if p.Spec.NodeName != "" {
			pods[p.Spec.NodeName] = append(pods[p.Spec.NodeName], Pod(p, runners))
		}
	}
	if in.Lease != nil {
		l, err := Lease(in.Lease)
		errs = append(errs, err)
		s.Lease = l
	}
	if in.Status != nil {
		st, c, err := Status(in.Status)
		errs = append(errs, err)
		s.Status, s.Request, s.Pause, s.Cancel = st, c.Request, c.Pause, c.Cancel
	}
	s.Nodes = make([]swapplan.Node, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		node, err := Node(n)
		errs = append(errs, err)
		if hb, ok := heartbeats[n.Name]; ok {
			node.Heartbeat = hb
		}
		node.Pods = pods[n.Name]
		node.Verdict = s.Status.Verdicts[n.Name]
		node.Domain = Domain(n, cfg.DomainLabel)
		s.Nodes = append(s.Nodes, node)
	}
	slices.SortFunc(s.Nodes, func(a, b swapplan.Node) int { return strings.Compare(a.Name, b.Name) })
	return s, errors.Join(errs...)
}

// Node converts a Node. A malformed annotation is left out of the result
// and named in the error. Heartbeat is the Ready condition's heartbeat;
// Build replaces it with the kubelet Lease's renew time where there is one.
func Node(n *corev1.Node) (swapplan.Node, error) {
	var errs []error
	ann := n.Annotations
	out := swapplan.Node{
		Name:            n.Name,
		Role:            n.Labels[api.LabelRole],
		Level:           n.Labels[api.LabelLevel],
		MemberName:      ann[api.AnnotationEtcdNodeName],
		MemberAddress:   ann[api.AnnotationEtcdNodeAddress],
		RemovedMember:   ann[api.AnnotationEtcdRemovedNodeName],
		RemoveRequested: ann[api.AnnotationEtcdRemove] == "true",
		Unschedulable:   n.Spec.Unschedulable,
		CordonedBy:      ann[api.AnnotationCordonedBy],
		MemberGone:      ann[api.AnnotationMemberGone],
	}
	out.Maintenance = Maintenance(n)
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Addresses = append(out.Addresses, a.Address)
		}
	}
	for _, l := range api.ServerLabels {
		if v, ok := n.Labels[l]; ok && v != "false" {
			out.ServerLabels = append(out.ServerLabels, l)
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == api.TaintEtcdOnly {
			out.EtcdTaint = true
		}
	}
	for _, c := range n.Status.Conditions {
		switch string(c.Type) {
		case string(corev1.NodeReady):
			out.Ready = c.Status == corev1.ConditionTrue
			out.Heartbeat = c.LastHeartbeatTime.Time
		case api.ConditionEtcdIsVoter:
			out.EtcdIsVoter = swapplan.Condition{Status: string(c.Status), Reason: c.Reason}
		}
	}
	what := "node/" + n.Name
	if v, ok := ann[api.AnnotationRequest]; ok {
		if r, err := decode[api.Request](v); err != nil {
			errs = append(errs, annotationError(what, api.AnnotationRequest, err))
		} else {
			out.Request = r
		}
	}
	if v, ok := ann[api.AnnotationReport]; ok {
		if r, err := decode[api.Report](v); err != nil {
			errs = append(errs, annotationError(what, api.AnnotationReport, err))
		} else {
			out.Report = r
		}
	}
	if v, ok := ann[api.AnnotationProbe]; ok {
		if p, err := decode[api.Probe](v); err != nil {
			errs = append(errs, annotationError(what, api.AnnotationProbe, err))
		} else {
			out.Probe = p
		}
	}
	return out, errors.Join(errs...)
}

// Maintenance says why the Node is under maintenance, as far as the Node
// itself tells (swapplan.Node.Maintenance): annotated
// api.AnnotationMaintenance, or cordoned by someone other than fleet-role
// (no api.AnnotationCordonedBy). Empty when it is not. kured's lock holder
// is marked by MarkKuredHolders.
func Maintenance(n *corev1.Node) string {
	if why := strings.TrimSpace(n.Annotations[api.AnnotationMaintenance]); why != "" {
		return "annotated " + api.AnnotationMaintenance + ": " + why
	}
	if n.Spec.Unschedulable && n.Annotations[api.AnnotationCordonedBy] == "" {
		return "cordoned, not by fleet-role"
	}
	return ""
}

// MarkKuredHolders marks the Nodes holding kured's reboot lock (by name,
// as kured's lock names them) as under maintenance, unless they are for
// another reason already.
func MarkKuredHolders(s *swapplan.Snapshot, holders []string) {
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Maintenance == "" && slices.Contains(holders, n.Name) {
			n.Maintenance = "holding kured's reboot lock"
		}
	}
}

// Domain is the Node's failure domain, the value of its label given;
// empty when it has none, or no label is given.
func Domain(n *corev1.Node, label string) string {
	if label == "" {
		return ""
	}
	return n.Labels[label]
}

// Pod converts a Pod; runners selects the runner pods.
func Pod(p *corev1.Pod, runners labels.Selector) swapplan.Pod {
	out := swapplan.Pod{
		Namespace:   p.Namespace,
		Name:        p.Name,
		Runner:      runners != nil && runners.Matches(labels.Set(p.Labels)),
		Finished:    p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		Terminating: p.DeletionTimestamp != nil,
	}
	_, out.Mirror = p.Annotations[corev1.MirrorPodAnnotationKey]
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			out.DaemonSet = true
		}
	}
	return out
}

// Lease converts the regrade Lease.
func Lease(l *coordinationv1.Lease) (swapplan.Lease, error) {
	var out swapplan.Lease
	if l.Spec.HolderIdentity != nil {
		out.Holder = *l.Spec.HolderIdentity
	}
	switch {
	case l.Spec.RenewTime != nil:
		out.RenewTime = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		out.RenewTime = l.Spec.AcquireTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		out.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if v, ok := l.Annotations[api.AnnotationSwap]; ok && v != "" {
		r, err := decode[api.SwapRecord](v)
		if err != nil {
			return out, annotationError("lease/"+l.Namespace+"/"+l.Name, api.AnnotationSwap, err)
		}
		out.Swap = r
	}
	return out, nil
}

// Controls are what people write into the status ConfigMap for the
// controller: the manual request, the pause and the cancel.
type Controls struct {
	Request *api.ManualRequest
	Pause   *api.Pause
	Cancel  *api.Cancel
}

// Status reads the status ConfigMap: the status the controller published
// and the controls people wrote. A key that does not read is an error
// naming it, and is left out.
func Status(cm *corev1.ConfigMap) (api.Status, Controls, error) {
	var errs []error
	var st api.Status
	var c Controls
	what := "configmap/" + cm.Namespace + "/" + cm.Name
	read := func(key string, into func(string) error) {
		if v, ok := cm.Data[key]; ok && strings.TrimSpace(v) != "" {
			if err := into(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: key %s: %w", what, key, err))
			}
		}
	}
	read(api.StatusKey, func(v string) error {
		s, err := decode[api.Status](v)
		if err == nil {
			st = *s
		}
		return err
	})
	read(api.RequestKey, func(v string) (err error) { c.Request, err = decode[api.ManualRequest](v); return err })
	read(api.PauseKey, func(v string) (err error) { c.Pause, err = decode[api.Pause](v); return err })
	read(api.CancelKey, func(v string) (err error) { c.Cancel, err = decode[api.Cancel](v); return err })
	return st, c, errors.Join(errs...)
}

// decode unmarshals a JSON value of the wire contract and validates it.
func decode[T any, PT interface {
	*T
	Validate() error
}](s string) (*T, error) {
	v := new(T)
	if err := json.Unmarshal([]byte(s), v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("field %q: want %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if err := PT(v).Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

func annotationError(what, annotation string, err error) error {
	return fmt.Errorf("%s: annotation %s: %w", what, annotation, err)
}
