package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
)

// marks tell other tools to keep off a swap while it runs: kured's reboot
// lock, which the controller takes itself in kured's own format (on
// kured's DaemonSet, configured or found, unless holds.kured_daemonset is
// "off"), so that kured reboots no Node until the swap ends; and the label
// api.LabelSwapping on the swap's two Nodes and on every other voter, so
// that an upgrade Plan whose nodeSelector excludes it keeps off every
// voter while the cluster has a failure less to spare. Each pass makes
// them agree with the swap under way, or with none: an end, a rollback's
// end and a restart release them alike.
type marks struct {
	client kubernetes.Interface
	cache  *cache
	holds  config.Holds
	// kured is kured's DaemonSet, shared with the holds when they are on.
	kured *kuredTarget
	now   func() time.Time
	// lockMaybeOurs: kured's lock may hold a place of ours though no
	// swap runs (so at the start, and after a claim); false once a read
	// found none. lockChecked is when the lock was last read while a swap
	// ran, or written.
	lockMaybeOurs bool
	lockChecked   time.Time
}

// actionMark labels the marks' failures in fleet_role_action_failures_total.
const actionMark = "mark"

// lockCheckEvery is how often, at most, the lock is read back while a
// swap runs (and at most half its TTL): kured never removes a place that
// is not its own, so a read is for a person's hand, or for the renewal.
const lockCheckEvery = time.Minute

func newMarks(client kubernetes.Interface, c *cache, holds config.Holds, now func() time.Time) *marks {
	return &marks{client: client, cache: c, holds: holds, kured: &kuredTarget{cfg: holds, client: client}, now: now, lockMaybeOurs: true}
}

// claim takes kured's lock for a swap about to start; it says why it
// could not, as a hold.
func (m *marks) claim(ctx context.Context) string {
	if m.holds.KuredOff() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	holders, err := m.takeLock(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("kured's lock cannot be taken: %v", err)
	case len(holders) > 0:
		return fmt.Sprintf("kured's reboot lock is held by %s", strings.Join(holders, ", "))
	}
	return ""
}

// keep makes the marks agree with swap, the swap under way after this
// pass (nil: none), and voters, the voters at this pass.
func (m *marks) keep(ctx context.Context, swap *api.SwapRecord, voters []string) error {
	var errs []error
	if err := m.label(ctx, swap, voters); err != nil {
		errs = append(errs, err)
	}
	if !m.holds.KuredOff() {
		ctx, cancel := context.WithTimeout(ctx, holdTimeout)
		defer cancel()
		if err := m.keepLock(ctx, swap != nil); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("mark the swap for other tools: %w", errors.Join(errs...))
	}
	return nil
}

// label puts api.LabelSwapping on the swap's two Nodes and on every other
// voter, and takes it off every other Node; the cache says which carry
// it, so an idle pass costs no request.
func (m *marks) label(ctx context.Context, swap *api.SwapRecord, voters []string) error {
	want := map[string]string{}
	if swap != nil {
		for _, v := range voters {
			want[v] = api.LabelSwappingVoter
		}
		want[swap.Out], want[swap.In] = api.LabelSwappingOut, api.LabelSwappingIn
	}
	have := m.cache.swappingLabels()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
		for n := range have {
			if _, ok := want[n]; !ok && !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		w, wanted := want[name]
		h, has := have[name]
		if wanted == has && w == h {
			continue
		}
		var value any // null removes the label
		if wanted {
			value = w
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{api.LabelSwapping: value}}})
		out, err := m.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			m.cache.forgetSwapping(name)
		case err != nil:
			return fmt.Errorf("label node %s: %w", name, err)
		default:
			m.cache.wrote(out)
		}
	}
	return nil
}

// keepLock holds kured's lock while a swap runs, from the pass that
// starts it to the one that ends it (taking it when free, renewing it
// past half its TTL), and releases the controller's places when none
// runs.
func (m *marks) keepLock(ctx context.Context, running bool) error {
	now := m.now()
	if !running {
		if !m.lockMaybeOurs {
			return nil
		}
		return m.releaseLock(ctx)
	}
	if now.Sub(m.lockChecked) < min(lockCheckEvery, m.holds.KuredLockTTL/2) {
		return nil
	}
	// A place of ours past half its TTL is renewed; one another holder
	// keeps (a swap started past kured's lock: swap --override holds) is
	// waited for.
	_, err := m.takeLock(ctx)
	return err
}

// takeLock reads kured's lock and, unless another holder keeps it, writes
// it as the controller's, fresh: the holders that keep it otherwise.
func (m *marks) takeLock(ctx context.Context) ([]string, error) {
	ds, lock, err := m.readLock(ctx)
	if err != nil || ds == nil {
		return nil, err
	}
	now := m.now()
	var holders []string
	for _, l := range lock.Locks {
		if l.NodeID != api.ControllerHolder && !l.expired(now) {
			holders = append(holders, l.NodeID)
		}
	}
	if len(holders) > 0 {
		return holders, nil
	}
	ours := kuredLock{NodeID: api.ControllerHolder, Metadata: json.RawMessage(`{"unschedulable":false}`), Created: now.UTC(), TTL: m.holds.KuredLockTTL}
	var value any = ours
	if lock.Multi || m.kured.lockConcurrency() > 1 {
		// Every place, so that no kured takes one (kured's
		// canAcquireMultiple counts the places taken against its own
		// --concurrency).
		n := max(m.kured.lockConcurrency(), lock.MaxOwners)
		value = kuredMultiLock{MaxOwners: &n, Locks: slices.Repeat([]kuredLock{ours}, n)}
	}
	if err := m.writeLock(ctx, ds, value); err != nil {
		return nil, err
	}
	m.lockMaybeOurs, m.lockChecked = true, now
	return nil, nil
}

// releaseLock takes the controller's places out of kured's lock, as
// kured's own Release does: the annotation removed (single), or the
// places removed and the rest kept (multiple).
func (m *marks) releaseLock(ctx context.Context) error {
	ds, lock, err := m.readLock(ctx)
	if err != nil {
		return err
	}
	if ds == nil {
		m.lockMaybeOurs = false
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(lock.Locks), func(l kuredLock) bool { return l.NodeID == api.ControllerHolder })
	switch {
	case len(rest) == len(lock.Locks):
		m.lockMaybeOurs = false
		return nil
	case lock.Multi:
		n := lock.MaxOwners
		err = m.writeLock(ctx, ds, kuredMultiLock{MaxOwners: &n, Locks: append([]kuredLock{}, rest...)})
	default:
		err = m.writeLock(ctx, ds, nil)
	}
	if err != nil {
		return err
	}
	m.lockMaybeOurs = false
	return nil
}

// readLock reads kured's DaemonSet and its lock; no DaemonSet (nil, and
// no error) when kured's is not found.
func (m *marks) readLock(ctx context.Context) (*appsv1.DaemonSet, kuredLockValue, error) {
	ns, name, none, err := m.kured.resolve(ctx, m.now())
	if err != nil || none != "" {
		return nil, kuredLockValue{}, err
	}
	ds, err := m.client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			m.kured.lost()
		}
		return nil, kuredLockValue{}, fmt.Errorf("read kured's DaemonSet %s/%s: %w", ns, name, err)
	}
	value := ds.Annotations[m.kured.lockAnnotation()]
	if value == "" {
		return ds, kuredLockValue{}, nil
	}
	lock, err := parseKuredLock(value)
	if err != nil {
		return nil, kuredLockValue{}, fmt.Errorf("read kured's lock %s on %s/%s: %w", m.kured.lockAnnotation(), ns, name, err)
	}
	return ds, lock, nil
}

// writeLock writes the lock (nil removes it) on the DaemonSet as read: a
// change made meanwhile, by kured or anyone, fails with a conflict.
func (m *marks) writeLock(ctx context.Context, ds *appsv1.DaemonSet, value any) error {
	if value == nil {
		delete(ds.Annotations, m.kured.lockAnnotation())
	} else {
		b, err := json.Marshal(value)
		if err != nil {
			return err
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		ds.Annotations[m.kured.lockAnnotation()] = string(b)
	}
	if _, err := m.client.AppsV1().DaemonSets(ds.Namespace).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write kured's lock on %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	return nil
}
