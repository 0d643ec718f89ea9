package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// swapPreview is what `fleet-role swap --dry-run` says of a request, as
// text (writePreview) or as itself with -o json|yaml.
type swapPreview struct {
	// Request is the request swap would write.
	Request api.ManualRequest `json:"request"`
	// Start: written now, the request would start its swap at the
	// controller's next pass.
	Start bool `json:"start"`
	// Obstacles are each reason that holds or refuses it now, in the
	// order the planner weighs them (swapplan.Obstacles).
	Obstacles []string `json:"obstacles,omitempty"`
	// Preflight says what the preflight could not compare of IN's staged
	// k3s server config with the voters' (swapplan.Preflight), which does
	// not keep the swap from starting; empty when it compared it all. A
	// setting that differs is among the Obstacles.
	Preflight string `json:"preflight,omitempty"`
	// Next is the controller's next action with the request written.
	Next previewAction `json:"next"`
	// Dead: OUT is dead by every sign, so the swap goes the dead voter's
	// way (its member removed before IN's promotion).
	Dead bool `json:"dead,omitempty"`
	// Steps are the steps the swap would take, in order (swapplan.Steps).
	Steps []string `json:"steps"`
	// HoldsReadAt is when the controller last read the holds (the
	// status's updatedAt): the dry run reads them as it published them.
	// Nil when it published none.
	HoldsReadAt *time.Time `json:"holdsReadAt,omitempty"`
}

// previewAction is the planner's next action: its type, its Node and its
// reason.
type previewAction struct {
	Type   string `json:"type"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
}

// previewSwap reads the cluster at now as `fleet-role swap` does before
// it writes (readCluster) and previews the request q. It writes nothing.
func previewSwap(ctx context.Context, client kubernetes.Interface, cfg config.Controller, q api.ManualRequest, now time.Time) (swapPreview, error) {
	snap, _, err := readClusterAt(ctx, client, cfg, now)
	if err != nil {
		return swapPreview{}, err
	}
	return preview(snap, q), nil
}

// preview runs the planner over the snapshot with q written into it, as
// the controller would at its next pass. The holds are not in the
// cluster's objects (the controller reads kured's lock, the upgrade Plans
// and Prometheus itself): they are taken as the controller last published
// them in its status.
func preview(snap swapplan.Snapshot, q api.ManualRequest) swapPreview {
	p := swapPreview{Request: q}
	if c := snap.Status.Controller; c != nil {
		snap.Holds = slices.Clone(c.Held)
		at := snap.Status.UpdatedAt
		p.HoldsReadAt = &at
	}
	p.Obstacles = swapplan.Obstacles(snap, q)
	_, p.Preflight = swapplan.Preflight(snap, q.Out, q.In)
	with := snap
	with.Request = &q
	plan := swapplan.Next(with)
	p.Next = previewAction{Type: plan.Action.Type, Node: plan.Action.Node, Reason: plan.Reason}
	p.Start = len(p.Obstacles) == 0 && plan.Action.Type == api.ActionStart && plan.Swap != nil &&
		plan.Swap.RequestAt != nil && plan.Swap.RequestAt.Equal(q.At)
	if plan.Swap != nil && p.Start {
		p.Dead = plan.Swap.Dead
	} else {
		p.Dead = slices.ContainsFunc(plan.Dead, func(d api.DeadVoter) bool { return d.Node == q.Out })
	}
	p.Steps = swapplan.Steps(p.Dead)
	return p
}

// writePreview writes the preview as a person reads it.
func writePreview(w io.Writer, p swapPreview) error {
	var b strings.Builder
	q := p.Request
	fmt.Fprintf(&b, "dry run, nothing written: swap %s out for %s in, by %s", q.Out, q.In, q.By)
	if len(q.Overrides) > 0 {
		fmt.Fprintf(&b, ", past: %s", strings.Join(q.Overrides, ", "))
	}
	b.WriteString("\n")
	switch {
	case p.Start:
		b.WriteString("would start: yes, at the controller's next pass\n")
	case len(p.Obstacles) == 0:
		fmt.Fprintf(&b, "would start: after the controller's next action, %s: %s\n", strings.TrimSpace(p.Next.Type+" "+p.Next.Node), p.Next.Reason)
	default:
		b.WriteString("would start: no; held or refused, each reason:\n")
		for _, o := range p.Obstacles {
			fmt.Fprintf(&b, "  - %s\n", o)
		}
	}
	if p.Preflight != "" {
		fmt.Fprintf(&b, "preflight: %s\n", p.Preflight)
	}
	if p.HoldsReadAt != nil {
		fmt.Fprintf(&b, "holds: as the controller last read them, at %s\n", clock(*p.HoldsReadAt))
	} else {
		b.WriteString("holds: unknown, the controller has published none\n")
	}
	if p.Dead {
		fmt.Fprintf(&b, "steps, in order (%s is dead by every sign: its member is removed before %s is promoted):\n", q.Out, q.In)
	} else {
		b.WriteString("steps, in order:\n")
	}
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
