package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
	// annotation and concurrency are what the DaemonSet found gives
	// kured (its --lock-annotation and --concurrency, as arguments or as
	// KURED_ environment variables); empty and 0 where it gives none.
	annotation  string
	concurrency int
}

// lockAnnotation is kured's lock annotation: the DaemonSet found says it,
// or holds.kured_lock_annotation.
func (k *kuredTarget) lockAnnotation() string {
	if k.annotation != "" {
		return k.annotation
	}
	return k.cfg.KuredLockAnnotation
}

// lockConcurrency is kured's --concurrency: the DaemonSet found says it,
// or holds.kured_concurrency.
func (k *kuredTarget) lockConcurrency() int {
	if k.concurrency > 0 {
		return k.concurrency
	}
	return k.cfg.KuredConcurrency
}

// kuredFlags reads kured's --lock-annotation and --concurrency from its
// DaemonSet's kured container: "--flag=value" or "--flag value" in its
// command and arguments, or KURED_LOCK_ANNOTATION and KURED_CONCURRENCY
// in its environment (kured reads both); the last one given counts, as
// with flags.
func kuredFlags(ds *appsv1.DaemonSet) (annotation string, concurrency int) {
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			switch e.Name {
			case "KURED_LOCK_ANNOTATION":
				annotation = e.Value
			case "KURED_CONCURRENCY":
				if n, err := strconv.Atoi(e.Value); err == nil && n > 0 {
					concurrency = n
				}
			}
		}
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			name, value, eq := strings.Cut(a, "=")
			if !eq && i+1 < len(args) {
				value = args[i+1]
			}
			switch name {
			case "--lock-annotation", "-lock-annotation":
				annotation = value
			case "--concurrency", "-concurrency":
				if n, err := strconv.Atoi(value); err == nil && n > 0 {
					concurrency = n
				}
			}
		}
	}
	return annotation, concurrency
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
	var found []*appsv1.DaemonSet
	for i := range list.Items {
		if ds := &list.Items[i]; ds.Labels[kuredChartLabel] == "kured" || ds.Name == "kured" {
			found = append(found, ds)
		}
	}
	slices.SortFunc(found, func(a, b *appsv1.DaemonSet) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	k.found, k.none, k.annotation, k.concurrency = "", "no kured DaemonSet found: none labelled "+kuredChartLabel+"=kured or named kured", "", 0
	if len(found) > 0 {
		k.found, k.none = found[0].Namespace+"/"+found[0].Name, ""
		k.annotation, k.concurrency = kuredFlags(found[0])
	}
	return nil
}
