package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// holdTimeout bounds each hold's read; one that times out holds.
const holdTimeout = 10 * time.Second

// The holds, as fleet_role_start_held labels them.
const (
	holdKured      = "kured"
	holdUpgrade    = "upgrade"
	holdPrometheus = "prometheus"
)

// holds reads what else holds the start of a swap (config.Holds). They are
// read only when a pass would start one, so an idle fleet costs nothing.
type holds struct {
	cfg    config.Holds
	client kubernetes.Interface
	prom   promv1.API
	filter *regexp.Regexp
	held   *prometheus.GaugeVec
}

// describeHolds names the holds configured, as a person reads them.
func describeHolds(cfg config.Holds) []string {
	var out []string
	if cfg.KuredDaemonSet != "" {
		out = append(out, "kured's reboot lock ("+cfg.KuredDaemonSet+")")
	}
	if cfg.UpgradePlansNamespace != "" {
		out = append(out, "an upgrade Plan applying (in "+cfg.UpgradePlansNamespace+")")
	}
	if cfg.PrometheusURL != "" {
		out = append(out, "an alert active at "+cfg.PrometheusURL)
	}
	return out
}

// newHolds returns nil when no hold is configured.
func newHolds(cfg config.Holds, client kubernetes.Interface, reg prometheus.Registerer) (*holds, error) {
	if cfg.KuredDaemonSet == "" && cfg.UpgradePlansNamespace == "" && cfg.PrometheusURL == "" {
		return nil, nil
	}
	h := &holds{cfg: cfg, client: client}
	if cfg.PrometheusURL != "" {
		c, err := promapi.NewClient(promapi.Config{Address: cfg.PrometheusURL})
		if err != nil {
			return nil, fmt.Errorf("holds.prometheus_url: %w", err)
		}
		h.prom = promv1.NewAPI(c)
		if cfg.AlertFilterRegexp != "" {
			h.filter = regexp.MustCompile(cfg.AlertFilterRegexp) // validated with the configuration
		}
	}
	h.held = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_start_held",
		Help: "1 while a swap would start but a hold keeps it from starting, by hold: kured, upgrade or prometheus."}, []string{"by"})
	reg.MustRegister(h.held)
	return h, nil
}

// check reads every configured hold and says what holds, one sentence each.
func (h *holds) check(ctx context.Context, s swapplan.Snapshot) []string {
	var out []string
	add := func(by string, why []string) {
		h.held.WithLabelValues(by).Set(float64(min(len(why), 1)))
		out = append(out, why...)
	}
	if h.cfg.KuredDaemonSet != "" {
		add(holdKured, h.kured(ctx, s.Now))
	}
	if h.cfg.UpgradePlansNamespace != "" {
		add(holdUpgrade, h.upgrades(ctx, fleetNodes(s)))
	}
	if h.prom != nil {
		add(holdPrometheus, h.alerts(ctx))
	}
	return out
}

// clear says nothing is held: no swap would start.
func (h *holds) clear() {
	h.held.Reset()
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

// kured says who holds kured's reboot lock, but the controller (a place
// of its own, left by a release that failed, is released by the pass).
func (h *holds) kured(ctx context.Context, now time.Time) []string {
	ns, name := h.cfg.KuredDaemonSetName()
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	ds, err := h.client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return []string{fmt.Sprintf("kured's lock on the DaemonSet %s/%s cannot be read: %v", ns, name, err)}
	}
	value, ok := ds.Annotations[h.cfg.KuredLockAnnotation]
	if !ok || value == "" {
		return nil
	}
	lock, err := parseKuredLock(value)
	if err != nil {
		return []string{fmt.Sprintf("kured's lock %s on %s/%s cannot be read: %v", h.cfg.KuredLockAnnotation, ns, name, err)}
	}
	var holders []string
	for _, l := range lock.Locks {
		if l.expired(now) || l.NodeID == api.ControllerHolder {
			continue
		}
		holders = append(holders, l.NodeID)
	}
	if len(holders) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("kured's reboot lock is held by %s", strings.Join(holders, ", "))}
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
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Applying []string `json:"applying"`
		} `json:"status"`
	} `json:"items"`
}

// upgrades says which Plans are applying to a Node of the fleet.
func (h *holds) upgrades(ctx context.Context, fleet map[string]bool) []string {
	ns := h.cfg.UpgradePlansNamespace
	rc := h.client.Discovery().RESTClient()
	if rc == nil {
		return []string{fmt.Sprintf("the Plans in %s cannot be read: no REST client", ns)}
	}
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	raw, err := rc.Get().AbsPath("/apis/upgrade.cattle.io/v1/namespaces", ns, "plans").DoRaw(ctx)
	if err != nil {
		return []string{fmt.Sprintf("the system-upgrade-controller's Plans in %s cannot be read: %v", ns, err)}
	}
	var plans upgradePlans
	if err := json.Unmarshal(raw, &plans); err != nil {
		return []string{fmt.Sprintf("the system-upgrade-controller's Plans in %s cannot be read: %v", ns, err)}
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
			out = append(out, fmt.Sprintf("the Plan %s/%s is applying to %s", ns, p.Metadata.Name, strings.Join(nodes, ", ")))
		}
	}
	return out
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
// but those it names), less pending ones when firing-only.
func (h *holds) alerts(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	value, _, _, err := h.prom.Query(ctx, "ALERTS", time.Now(), promv1.WithTimeout(holdTimeout))
	if err != nil {
		return []string{fmt.Sprintf("the alerts at %s cannot be read: %v", h.cfg.PrometheusURL, err)}
	}
	vector, ok := value.(model.Vector)
	if !ok {
		return []string{fmt.Sprintf("the alerts at %s cannot be read: a %s, not a vector", h.cfg.PrometheusURL, value.Type())}
	}
	active := map[string]bool{}
	for _, sample := range vector {
		name, isAlert := sample.Metric[model.AlertNameLabel]
		if !isAlert || sample.Value == 0 {
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
		return nil
	}
	names := make([]string, 0, len(active))
	for n := range active {
		names = append(names, n)
	}
	sort.Strings(names)
	return []string{fmt.Sprintf("alerts are active at %s: %s", h.cfg.PrometheusURL, strings.Join(names, ", "))}
}
