package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// holdTimeout bounds each hold's read; one that times out holds.
const holdTimeout = 10 * time.Second

// holdReread is how long a reading of the holds is shown again rather
// than read anew, while no swap would start: a pass that would start one
// reads them fresh.
const holdReread = 30 * time.Second

// The holds, as fleet_role_start_held labels them.
const (
	holdKured      = "kured"
	holdUpgrade    = "upgrade"
	holdPrometheus = "prometheus"
)

// holds reads what else disrupts the cluster (config.Holds): what holds a
// swap's start and, during a swap, its outgoing voter's stop. They are
// read on every pass, with a swap under way or not, so that a dry run and
// status say what would hold one and a disruption that begins mid-swap
// holds the next stop; a reading is shown again for holdReread, but a
// pass that would start a swap or stop its outgoing voter reads them
// fresh. kured's lock and the Plans are watched where their object
// exists (kured's DaemonSet found, the Plans' CRD installed).
type holds struct {
	cfg    config.Holds
	client kubernetes.Interface
	prom   promv1.API
	filter *regexp.Regexp
	ignore *regexp.Regexp
	// kuredDS is kured's DaemonSet, configured or found; the marks take
	// kured's lock on the same one.
	kuredDS *kuredTarget
	held    *prometheus.GaugeVec
	// since is when each hold in force began (this replica's reading).
	since *prometheus.GaugeVec
	// unreadable is 1 for each hold whose last read failed;
	// readFailures counts the failed reads.
	unreadable   *prometheus.GaugeVec
	readFailures *prometheus.CounterVec
	// warn tells of a hold that turned unreadable (an Event).
	warn func(by, why string)

	// The last reading: when, for which outgoing voter, what it said.
	readAt  time.Time
	readOut string
	last    []string
	// heldSince and failing are per hold, as last read.
	heldSince map[string]time.Time
	failing   map[string]bool
	// kuredHolders are the Nodes holding kured's lock, as last read (not
	// the controller): under maintenance (adapt.MarkKuredHolders).
	kuredHolders []string
	// off says, per hold on by default, why the last reading found it
	// off: its object is not there.
	off map[string]string
}

// The holds' names as a person reads them, in status's HOLDS line.
const (
	kuredPhrase   = "kured's reboot lock"
	upgradePhrase = "an upgrade Plan applying"
	alertsPhrase  = "an alert active"
)

// holdSources says, for status, what each hold watches, and what is off
// and why (off in the configuration, or its object not found at the last
// reading): h may be nil, when every hold is off.
func holdSources(cfg config.Holds, h *holds) (watched, off []string) {
	found := func(by string) string {
		if h == nil {
			return ""
		}
		return h.off[by]
	}
	switch {
	case cfg.KuredOff():
		off = append(off, kuredPhrase+` (holds.kured_daemonset is "off")`)
	case found(holdKured) != "":
		off = append(off, kuredPhrase+" ("+found(holdKured)+")")
	case cfg.KuredDaemonSet != "":
		watched = append(watched, kuredPhrase+" ("+cfg.KuredDaemonSet+")")
	case h != nil && h.kuredDS.found != "":
		watched = append(watched, kuredPhrase+" ("+h.kuredDS.found+", found by itself)")
	default:
		watched = append(watched, kuredPhrase+" (its DaemonSet is looked for at the next reading)")
	}
	switch {
	case cfg.UpgradesOff():
		off = append(off, upgradePhrase+` (holds.upgrade_plans_namespace is "off")`)
	case found(holdUpgrade) != "":
		off = append(off, upgradePhrase+" ("+found(holdUpgrade)+")")
	case cfg.UpgradePlansNamespace != "":
		watched = append(watched, upgradePhrase+" (in "+cfg.UpgradePlansNamespace+")")
	default:
		watched = append(watched, upgradePhrase+" (in every namespace)")
	}
	if cfg.PrometheusURL == "" {
		off = append(off, alertsPhrase+" (holds.prometheus_url is empty)")
	} else {
		watched = append(watched, alertsPhrase+" at "+cfg.PrometheusURL)
	}
	return watched, off
}

// newHolds returns nil when every hold is off.
func newHolds(cfg config.Holds, client kubernetes.Interface, reg prometheus.Registerer) (*holds, error) {
	if cfg.KuredOff() && cfg.UpgradesOff() && cfg.PrometheusURL == "" {
		return nil, nil
	}
	h := &holds{cfg: cfg, client: client, kuredDS: &kuredTarget{cfg: cfg, client: client}}
	if cfg.PrometheusURL != "" {
		c, err := promapi.NewClient(promapi.Config{Address: cfg.PrometheusURL})
		if err != nil {
			return nil, fmt.Errorf("holds.prometheus_url: %w", err)
		}
		h.prom = promv1.NewAPI(c)
		if cfg.AlertFilterRegexp != "" {
			h.filter = regexp.MustCompile(cfg.AlertFilterRegexp) // validated with the configuration
		}
		if cfg.AlertIgnoreRegexp != "" {
			h.ignore = regexp.MustCompile(cfg.AlertIgnoreRegexp) // validated with the configuration
		}
	}
	h.held = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_start_held",
		Help: "1 while a hold is in force (read on every pass), by hold: kured, upgrade or prometheus."}, []string{"by"})
	h.since = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_start_held_since_timestamp_seconds",
		Help: "When each hold in force began, as this replica read it, in seconds since the epoch; no series while it is not in force."}, []string{"by"})
	h.unreadable = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_hold_unreadable",
		Help: "1 while a hold cannot be read (it then holds), by hold: kured, upgrade or prometheus."}, []string{"by"})
	h.readFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_hold_read_failures_total",
		Help: "Reads of a hold that failed, by hold: kured, upgrade or prometheus."}, []string{"by"})
	reg.MustRegister(h.held, h.since, h.unreadable, h.readFailures)
	h.heldSince, h.failing, h.off = map[string]time.Time{}, map[string]bool{}, map[string]string{}
	return h, nil
}

// read says what holds a swap of out (nil: none known) now, one sentence
// each: the last reading when it is younger than holdReread and for the
// same voter, unless fresh.
func (h *holds) read(ctx context.Context, s swapplan.Snapshot, out *swapplan.Node, fresh bool) []string {
	name := ""
	if out != nil {
		name = out.Name
	}
	if !fresh && !h.readAt.IsZero() && name == h.readOut && s.Now.Sub(h.readAt) < holdReread && !s.Now.Before(h.readAt) {
		return slices.Clone(h.last)
	}
	h.last, h.readAt, h.readOut = h.check(ctx, s, out), s.Now, name
	return slices.Clone(h.last)
}

// check reads every hold not off and says what holds a swap of out (nil:
// none known), one sentence each. A hold that cannot be read holds, and
// is counted, and told when it turns so; one whose object is not there
// (kured's DaemonSet not found, the Plans' CRD not installed) is off, and
// says so in status.
func (h *holds) check(ctx context.Context, s swapplan.Snapshot, out *swapplan.Node) []string {
	var sentences []string
	add := func(by string, why []string, err error) {
		delete(h.off, by)
		if err != nil {
			h.readFailures.WithLabelValues(by).Inc()
			h.unreadable.WithLabelValues(by).Set(1)
			if !h.failing[by] && h.warn != nil {
				h.warn(by, err.Error())
			}
			h.failing[by] = true
			why = append(why, err.Error())
		} else {
			h.unreadable.WithLabelValues(by).Set(0)
			delete(h.failing, by)
		}
		h.held.WithLabelValues(by).Set(float64(min(len(why), 1)))
		if len(why) == 0 {
			delete(h.heldSince, by)
			h.since.DeleteLabelValues(by)
		} else if _, ok := h.heldSince[by]; !ok {
			h.heldSince[by] = s.Now
			h.since.WithLabelValues(by).Set(float64(s.Now.UnixMilli()) / 1000)
		}
		sentences = append(sentences, why...)
	}
	absent := func(by, why string) {
		add(by, nil, nil)
		h.off[by] = why
	}
	h.kuredHolders = nil
	if !h.cfg.KuredOff() {
		ns, name, none, err := h.kuredDS.resolve(ctx, s.Now)
		switch {
		case err != nil:
			add(holdKured, nil, err)
		case none != "":
			absent(holdKured, none)
		default:
			why, err := h.kured(ctx, s.Now, ns, name)
			add(holdKured, why, err)
		}
	}
	if !h.cfg.UpgradesOff() {
		why, none, err := h.upgrades(ctx, fleetNodes(s))
		if none != "" {
			absent(holdUpgrade, none)
		} else {
			add(holdUpgrade, why, err)
		}
	}
	if h.prom != nil {
		why, err := h.alerts(ctx, out)
		add(holdPrometheus, why, err)
	}
	return sentences
}

// kuredLock is one holder of kured's lock annotation, as kured's
// pkg/daemonsetlock LockAnnotationValue writes it; Metadata is kept as
// read, for a place the controller writes back.
type kuredLock struct {
	NodeID   string          `json:"nodeID"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Created  time.Time       `json:"created"`
	TTL      time.Duration   `json:"TTL"`
}

// expired: as kured's ttlExpired, a place whose TTL has run out is free;
// one with no TTL is held until released (kured would judge it by its
// --lock-ttl, which is not known here: the stricter reading).
func (l kuredLock) expired(now time.Time) bool {
	return l.TTL > 0 && !now.Before(l.Created.Add(l.TTL))
}

// kuredMultiLock is the annotation of kured with --concurrency above 1
// (multiLockAnnotationValue): up to maxOwners holders.
type kuredMultiLock struct {
	MaxOwners *int        `json:"maxOwners"`
	Locks     []kuredLock `json:"locks"`
}

// kuredLockValue is the annotation read, either form.
type kuredLockValue struct {
	Multi     bool
	MaxOwners int
	Locks     []kuredLock
}

// kured says who holds kured's reboot lock on the DaemonSet ns/name, but
// the controller: its own place, taken for its swap, never holds that swap
// (one left by a release that failed is released by the pass).
func (h *holds) kured(ctx context.Context, now time.Time, ns, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	h.kuredHolders = nil
	ds, err := h.client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			h.kuredDS.lost()
		}
		return nil, fmt.Errorf("kured's lock on the DaemonSet %s/%s cannot be read: %w", ns, name, err)
	}
	value, ok := ds.Annotations[h.kuredDS.lockAnnotation()]
	if !ok || value == "" {
		return nil, nil
	}
	lock, err := parseKuredLock(value)
	if err != nil {
		return nil, fmt.Errorf("kured's lock %s on %s/%s cannot be read: %w", h.kuredDS.lockAnnotation(), ns, name, err)
	}
	var holders []string
	for _, l := range lock.Locks {
		if l.expired(now) || l.NodeID == api.ControllerHolder {
			continue
		}
		holders = append(holders, l.NodeID)
	}
	h.kuredHolders = holders
	if len(holders) == 0 {
		return nil, nil
	}
	return []string{fmt.Sprintf("kured's reboot lock is held by %s", strings.Join(holders, ", "))}, nil
}

// parseKuredLock reads either form of the annotation.
func parseKuredLock(value string) (kuredLockValue, error) {
	var multi kuredMultiLock
	if err := json.Unmarshal([]byte(value), &multi); err != nil {
		return kuredLockValue{}, err
	}
	if multi.MaxOwners != nil || multi.Locks != nil {
		out := kuredLockValue{Multi: true, Locks: multi.Locks}
		if multi.MaxOwners != nil {
			out.MaxOwners = *multi.MaxOwners
		}
		return out, nil
	}
	var one kuredLock
	if err := json.Unmarshal([]byte(value), &one); err != nil {
		return kuredLockValue{}, err
	}
	if one.NodeID == "" {
		return kuredLockValue{}, fmt.Errorf("no nodeID in %q", value)
	}
	return kuredLockValue{Locks: []kuredLock{one}}, nil
}

// upgradePlans is what is read of the system-upgrade-controller's Plans
// (upgrade.cattle.io/v1, its pkg/apis/upgrade.cattle.io/v1 PlanStatus):
// the Nodes each is being applied on.
type upgradePlans struct {
	Items []struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Applying []string `json:"applying"`
		} `json:"status"`
	} `json:"items"`
}

// upgradesGroupVersion is the system-upgrade-controller's API; its
// Plans' CRD is plans.upgrade.cattle.io.
const upgradesGroupVersion = "upgrade.cattle.io/v1"

// upgrades says which Plans are applying to a Node of the fleet: those of
// holds.upgrade_plans_namespace, or of every namespace where it is empty.
// none says why the Plans are not watched: their CRD is not installed.
func (h *holds) upgrades(ctx context.Context, fleet map[string]bool) (why []string, none string, err error) {
	ns := h.cfg.UpgradePlansNamespace
	where, path := "in "+ns, "/apis/"+upgradesGroupVersion+"/namespaces/"+ns+"/plans"
	if ns == "" {
		where, path = "in every namespace", "/apis/"+upgradesGroupVersion+"/plans"
	}
	resources, err := h.client.Discovery().ServerResourcesForGroupVersion(upgradesGroupVersion)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "plans" })):
		return nil, "the CRD plans.upgrade.cattle.io is not installed", nil
	case err != nil:
		return nil, "", fmt.Errorf("the system-upgrade-controller's API %s cannot be read: %w", upgradesGroupVersion, err)
	}
	rc := h.client.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() {
		return nil, "", fmt.Errorf("the Plans %s cannot be read: no REST client", where)
	}
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	raw, err := rc.Get().AbsPath(path).DoRaw(ctx)
	if ns == "" && apierrors.IsForbidden(err) {
		// Note: as kured's DaemonSet found by itself (kuredTarget.search),
		// the Plans of every namespace are a default: off, and said so,
		// where the controller may not list them.
		return nil, "the controller may not list the Plans of every namespace: set holds.upgrade_plans_namespace, or grant it list on plans", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("the system-upgrade-controller's Plans %s cannot be read: %w", where, err)
	}
	var plans upgradePlans
	if err := json.Unmarshal(raw, &plans); err != nil {
		return nil, "", fmt.Errorf("the system-upgrade-controller's Plans %s cannot be read: %w", where, err)
	}
	var out []string
	for _, p := range plans.Items {
		var nodes []string
		for _, n := range p.Status.Applying {
			if fleet[n] {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) > 0 {
			slices.Sort(nodes)
			out = append(out, fmt.Sprintf("the Plan %s/%s is applying to %s", p.Metadata.Namespace, p.Metadata.Name, strings.Join(nodes, ", ")))
		}
	}
	return out, "", nil
}

// fleetNodes are the Nodes a swap may touch: the voters and the standbys.
func fleetNodes(s swapplan.Snapshot) map[string]bool {
	m := map[string]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Voter() || n.Role == api.RoleVoter || n.Role == api.RoleStandby {
			m[n.Name] = true
		}
	}
	return m
}

// alerts says which alerts are active, as kured's PrometheusBlockingChecker
// (pkg/blockers/prometheus.go, ActiveAlerts) finds them: the ALERTS series
// with a non-zero value, less those the filter excludes (or, match-only,
// but those it names), less pending ones when firing-only. Before the
// filter, those alert_ignore_regexp names go, and with
// alert_ignore_outgoing those about out.
func (h *holds) alerts(ctx context.Context, out *swapplan.Node) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	value, _, _, err := h.prom.Query(ctx, "ALERTS", time.Now(), promv1.WithTimeout(holdTimeout))
	if err != nil {
		return nil, fmt.Errorf("the alerts at %s cannot be read: %w", h.cfg.PrometheusURL, err)
	}
	vector, ok := value.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("the alerts at %s cannot be read: a %s, not a vector", h.cfg.PrometheusURL, value.Type())
	}
	active := map[string]bool{}
	for _, sample := range vector {
		name, isAlert := sample.Metric[model.AlertNameLabel]
		if !isAlert || sample.Value == 0 {
			continue
		}
		if h.ignore != nil && h.ignore.MatchString(string(name)) {
			continue
		}
		if h.cfg.AlertIgnoreOutgoing && about(sample.Metric, out) {
			continue
		}
		if h.filter != nil && h.filter.MatchString(string(name)) != h.cfg.AlertFilterMatchOnly {
			continue
		}
		if h.cfg.AlertFiringOnly && sample.Metric["alertstate"] != "firing" {
			continue
		}
		active[string(name)] = true
	}
	if len(active) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(active))
	for n := range active {
		names = append(names, n)
	}
	sort.Strings(names)
	return []string{fmt.Sprintf("alerts are active at %s: %s", h.cfg.PrometheusURL, strings.Join(names, ", "))}, nil
}

// about says an alert's labels name the host n: its node label is n's
// Node name, or its instance label, less its port, is n's Node name or
// its member's address. Note: an alert aggregated over the cluster
// (kube-prometheus's etcdMembersDown and etcdInsufficientMembers keep no
// instance) names no host, and is about none.
func about(m model.Metric, n *swapplan.Node) bool {
	if n == nil {
		return false
	}
	if node := string(m["node"]); node != "" && node == n.Name {
		return true
	}
	instance := string(m[model.InstanceLabel])
	if instance == "" {
		return false
	}
	host := instance
	if h, _, err := net.SplitHostPort(instance); err == nil {
		host = h
	}
	addr := n.MemberAddress
	if h, _, err := net.SplitHostPort(addr); err == nil {
		addr = h
	}
	return host == n.Name || (addr != "" && host == addr)
}

// outgoing is the voter the plan would swap out, or the manual request
// names: nil when none.
func outgoing(s swapplan.Snapshot, plan swapplan.Plan) *swapplan.Node {
	name := ""
	switch {
	case plan.Swap != nil:
		name = plan.Swap.Out
	case plan.Decision != nil:
		name = plan.Decision.Out
	case s.Request != nil:
		name = s.Request.Out
	}
	for i := range s.Nodes {
		if name != "" && s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

// stopsOutgoing says the plan stops a swap's outgoing voter (its
// step-down, the step the holds gate): the holds are read fresh for it.
func stopsOutgoing(plan swapplan.Plan) bool {
	return plan.Swap != nil && plan.Action.Type == api.ActionStepDown && plan.Action.Node == plan.Swap.Out
}

// holdWarning records a warning Event, on the controller's status
// ConfigMap, that a hold cannot be read (and holds until it can).
func holdWarning(rec record.EventRecorder, namespace string) func(by, why string) {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: namespace, Name: api.StatusConfigMap}
	return func(by, why string) {
		rec.Eventf(ref, corev1.EventTypeWarning, api.EventHoldUnreadable, "the %s hold cannot be read, so it holds: %s", by, why)
	}
}
