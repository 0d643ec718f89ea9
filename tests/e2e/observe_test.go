package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
)

// hostView is what a user can observe of a host, on its Node and on the
// host itself, in terms both tiers share: fleet-role's role label, which
// of k3s's server roles its Node is labelled with, fleet-role's and k3s's
// etcd annotations on it with their values as annotationValue puts them
// (without the times and IDs that differ from run to run), its Ready
// condition and in the etcd role its EtcdIsVoter, its cordon, and its
// k3s's states as started or stopped, and enabled: on a native host its
// units' (unitState), on a Docker host its containers' under the units'
// names (containerState).
type hostView struct {
	Role          string            `json:"role"`
	ServerLabels  []string          `json:"serverLabels,omitempty"`
	Annotations   map[string]string `json:"annotations"`
	Ready         string            `json:"ready"`
	EtcdIsVoter   string            `json:"etcdIsVoter,omitempty"`
	Unschedulable bool              `json:"unschedulable,omitempty"`
	Units         map[string]string `json:"units,omitempty"`
}

// fleetView is what a user can observe of the fleet after a swap: how it
// ended, etcd's voters and learners by host, and each host's view.
type fleetView struct {
	Result   string              `json:"result"`
	Voters   []string            `json:"voters"`
	Learners []string            `json:"learners"`
	Hosts    map[string]hostView `json:"hosts"`
}

// observe reads the fleet's view of the hosts named, their units on the
// hosts of native (systemd) ones.
func (f *Fleet) observe(result string, hosts ...string) (fleetView, error) {
	v := fleetView{Result: result, Voters: []string{}, Learners: []string{}, Hosts: map[string]hostView{}}
	m, err := f.Members()
	if err != nil {
		return v, err
	}
	host := func(member string) string { return member[:max(strings.LastIndex(member, "-"), 0)] }
	for _, s := range m.Voters {
		v.Voters = append(v.Voters, host(s))
	}
	for _, s := range m.Learners {
		v.Learners = append(v.Learners, host(s))
	}
	slices.Sort(v.Voters)
	slices.Sort(v.Learners)
	for _, name := range hosts {
		n, err := f.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return v, err
		}
		hv := hostView{Role: n.Labels[api.LabelRole], Annotations: map[string]string{}, Unschedulable: n.Spec.Unschedulable}
		for _, l := range api.ServerLabels {
			if n.Labels[l] == "true" {
				hv.ServerLabels = append(hv.ServerLabels, l)
			}
		}
		for k, val := range n.Annotations {
			// Note: not k3s's etcd-snapshots-timestamp annotations, of
			// k3s's own snapshots, which the double does not take.
			if strings.HasPrefix(k, "fleet-role.io/") || (strings.HasPrefix(k, "etcd.k3s.cattle.io/") && !strings.HasSuffix(k, "snapshots-timestamp")) {
				hv.Annotations[k] = f.annotationValue(name, k, val)
			}
		}
		for _, c := range n.Status.Conditions {
			switch c.Type {
			case corev1.NodeReady:
				hv.Ready = string(c.Status)
			case api.ConditionEtcdIsVoter:
				// Note: k3s keeps it on the Nodes in the etcd role
				// alone; on a Node out of it, it is whatever k3s's last
				// pass wrote, which depends on when that pass came.
				if n.Labels[api.LabelEtcd] == "true" {
					hv.EtcdIsVoter = string(c.Status) + "/" + c.Reason
				}
			}
		}
		h := f.Hosts[name]
		hv.Units = map[string]string{}
		for u, c := range map[string]string{"k3s.service": "k3s-server", "k3s-agent.service": "k3s-agent"} {
			started, enabled := h.unitState(u)
			if h.Docker {
				started, enabled = h.containerState(c)
			}
			hv.Units[u] = started + "/" + enabled
		}
		v.Hosts[name] = hv
	}
	return v, nil
}

// memberName is an etcd member's name as k3s makes it, the node's name
// and 8 hex digits (k3s-io/k3s pkg/etcd/etcd.go, (*ETCD).setName).
var memberName = regexp.MustCompile(`\b([a-z][a-z0-9-]*)-[0-9a-f]{8}\b`)

// annotationValue is an annotation's value on host's Node as the view
// holds it, without what differs from run to run: a member's name keeps
// its node's name (NAME-*), an address is named by its host (NAME's
// address); of fleet-role's probe sample, whether the host is staged and
// its member; of an agent's report, its action and state.
func (f *Fleet) annotationValue(host, key, val string) string {
	switch key {
	case api.AnnotationProbe:
		var p api.Probe
		if err := json.Unmarshal([]byte(val), &p); err != nil {
			return "malformed: " + err.Error()
		}
		return fmt.Sprintf("staged=%t member=%s", p.Staged, f.annotationValue(host, "", p.Member))
	case api.AnnotationReport:
		var r api.Report
		if err := json.Unmarshal([]byte(val), &r); err != nil {
			return "malformed: " + err.Error()
		}
		return r.Action + "/" + r.State
	}
	val = memberName.ReplaceAllString(val, "$1-*")
	for _, n := range f.Order {
		if ip := f.Hosts[n].IP; ip != "" {
			val = regexp.MustCompile(`\b`+regexp.QuoteMeta(ip)+`\b`).ReplaceAllString(val, n+"'s address")
		}
	}
	return val
}

// containerState is a Docker host's k3s container's state in a unit's
// terms (unitState): "started" while it runs (or restarts), and
// "enabled" when the host's engine starts it again by itself at its next
// start, as platform/docker's revives says: under always, or under
// unless-stopped while it runs. A container that is not there is stopped
// and disabled.
func (h *Host) containerState(name string) (started, enabled string) {
	out, err := h.exec("docker", "inspect", "-f", "{{.State.Running}} {{.State.Restarting}} {{.HostConfig.RestartPolicy.Name}}", name)
	fields := strings.Fields(out)
	if err != nil || len(fields) != 3 {
		return "stopped", "disabled"
	}
	running := fields[0] == "true" || fields[1] == "true"
	started, enabled = "stopped", "disabled"
	if running {
		started = "started"
	}
	if fields[2] == "always" || running && (fields[2] == "unless-stopped" || fields[2] == "on-failure") {
		enabled = "enabled"
	}
	return started, enabled
}

// viewAfterBootstrapSwap is the view both tiers must come to after the
// swap of the bootstrap server v1 for the standby s1, as real k3s showed
// it (TestOnRealK3s): the same file is asserted on the double, so a
// difference between the tiers fails one of them.
const viewAfterBootstrapSwap = "testdata/after-bootstrap-swap.json"

// requireView waits until the fleet's view of the hosts named is the one
// in file (for a minute: k3s's leader writes conditions and labels in its
// own passes after a swap's end), and fails with the difference if it
// never is. FLEET_ROLE_E2E_WRITE_VIEW=1 writes the view read instead, to
// record it from real k3s.
func (f *Fleet) requireView(t *testing.T, file, result string, hosts ...string) {
	t.Helper()
	if os.Getenv("FLEET_ROLE_E2E_WRITE_VIEW") != "" && f.k3s != "" {
		// Once settled, the view must hold still: read twice, 30 s apart.
		time.Sleep(30 * time.Second)
		v, err := f.observe(result, hosts...)
		require.NoError(t, err)
		time.Sleep(30 * time.Second)
		again, err := f.observe(result, hosts...)
		require.NoError(t, err)
		require.Equal(t, v, again, "the view holds still")
		b, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
		require.NoError(t, os.WriteFile(file, append(b, '\n'), 0o644))
		t.Logf("wrote the view to %s", file)
		return
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var want fleetView
	require.NoError(t, json.Unmarshal(b, &want))
	var got fleetView
	err = f.poll(time.Minute, func() error {
		if got, err = f.observe(result, hosts...); err != nil {
			return err
		}
		if !reflect.DeepEqual(want, got) {
			return errors.New("the view differs")
		}
		return nil
	})
	if err != nil && got.Hosts != nil {
		logViewDiff(t, want, got)
		require.Equal(t, want, got, "the fleet's view after the swap differs from real k3s's (%s)", file)
	}
	require.NoError(t, err)
}

// logViewDiff logs, a line each, what differs between two views, so
// that the difference shows in a short excerpt of the log too.
func logViewDiff(t *testing.T, want, got fleetView) {
	t.Helper()
	if !slices.Equal(want.Voters, got.Voters) || !slices.Equal(want.Learners, got.Learners) {
		t.Logf("view: voters %v learners %v, want voters %v learners %v", got.Voters, got.Learners, want.Voters, want.Learners)
	}
	for _, name := range slices.Sorted(maps.Keys(want.Hosts)) {
		if w, g := want.Hosts[name], got.Hosts[name]; !reflect.DeepEqual(w, g) {
			t.Logf("view: %s is %+v, want %+v", name, g, w)
		}
	}
}

// poll calls fn every second until it returns nil or timeout passes, and
// returns its last error.
func (f *Fleet) poll(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("after %s: %w", timeout, err)
			}
			return nil
		}
		time.Sleep(time.Second)
	}
}
