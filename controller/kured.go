package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/config"
)

// kuredChartLabel is the label kured's Helm chart puts on its DaemonSet,
// whose value is kured; kured's own manifests name it kured (in
// kube-system) and label only its pods.
const kuredChartLabel = "app.kubernetes.io/name"

// kuredSearchEvery is how often, at most, the DaemonSets are searched for
// kured's when holds.kured_daemonset is empty: a kured installed later is
// watched within it.
const kuredSearchEvery = 5 * time.Minute

// kuredTarget is kured's DaemonSet, which carries its reboot lock: the one
// holds.kured_daemonset names, or, where it is empty, the one found among
// every namespace's DaemonSets, labelled app.kubernetes.io/name=kured or
// named kured (the first by namespace and name, where several are). The
// holds read the lock on it and the marks take it there.
type kuredTarget struct {
	cfg    config.Holds
	client kubernetes.Interface
	// searchedAt is when the DaemonSets were last searched; found is what
	// that found ("namespace/name"), none why nothing was.
	searchedAt  time.Time
	found, none string
}

// resolve says which DaemonSet carries kured's lock, or why none does
// (none: kured is off, or not found); err when the search failed.
func (k *kuredTarget) resolve(ctx context.Context, now time.Time) (ns, name, none string, err error) {
	switch {
	case k.cfg.KuredOff():
		return "", "", `holds.kured_daemonset is "off"`, nil
	case k.cfg.KuredDaemonSet != "":
		ns, name := k.cfg.KuredDaemonSetName()
		return ns, name, "", nil
	}
	if k.searchedAt.IsZero() || now.Sub(k.searchedAt) >= kuredSearchEvery || now.Before(k.searchedAt) {
		if err := k.search(ctx); err != nil {
			return "", "", "", err
		}
		k.searchedAt = now
	}
	if k.found == "" {
		return "", "", k.none, nil
	}
	ns, name, _ = strings.Cut(k.found, "/")
	return ns, name, "", nil
}

// lost says the DaemonSet found is gone: the next resolve searches again.
func (k *kuredTarget) lost() {
	if k.cfg.KuredDaemonSet == "" {
		k.searchedAt = time.Time{}
	}
}

func (k *kuredTarget) search(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	list, err := k.client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		// Note: kured's lock found by itself is a default, not a hold
		// asked for: one the controller may not look for is off, and
		// says why in status, rather than holding every swap for want
		// of a grant (a DaemonSet configured by name and unreadable
		// holds).
		k.found, k.none = "", "the controller may not list DaemonSets to find kured's: set holds.kured_daemonset, or grant it list on daemonsets"
		return nil
	}
	if err != nil {
		return fmt.Errorf("kured's DaemonSet cannot be looked for (holds.kured_daemonset names it, or \"off\"): %w", err)
	}
	var found []string
	for _, ds := range list.Items {
		if ds.Labels[kuredChartLabel] == "kured" || ds.Name == "kured" {
			found = append(found, ds.Namespace+"/"+ds.Name)
		}
	}
	slices.Sort(found)
	k.found, k.none = "", "no kured DaemonSet found: none labelled "+kuredChartLabel+"=kured or named kured"
	if len(found) > 0 {
		k.found, k.none = found[0], ""
	}
	return nil
}
