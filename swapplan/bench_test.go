package swapplan_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// benchSnapshot is a fleet of n Nodes with 10 Pods each, three voters and
// two standbys among them, mid-swap at the gates (the pass that reads the
// most: every voter's membership).
func benchSnapshot(n int) swapplan.Snapshot {
	w := newWorld(&testing.T{}, 3, 2, n-5)
	w.requestSwap("v1", "s1")
	for range 200 {
		if p := w.pass(); p.Step == api.StepGates || p.Action.Type == api.ActionCordonOut {
			break
		}
	}
	s := w.snapshot()
	for i := range s.Nodes {
		node := &s.Nodes[i]
		for j := len(node.Pods); j < 10; j++ {
			node.Pods = append(node.Pods, swapplan.Pod{Namespace: "apps", Name: fmt.Sprintf("p-%s-%d", node.Name, j)})
		}
	}
	return s
}

func BenchmarkNext(b *testing.B) {
	for _, n := range []int{50, 500, 5000} {
		s := benchSnapshot(n)
		if p := swapplan.Next(s); p.Step == "" {
			b.Fatalf("not mid-swap: %+v", p)
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				swapplan.Next(s)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
		})
	}
}

func BenchmarkNextIdle(b *testing.B) {
	s := benchSnapshot(5000)
	s.Lease, s.Status, s.Request = swapplan.Lease{}, api.Status{}, nil
	s.Now = s.Now.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		swapplan.Next(s)
	}
}
