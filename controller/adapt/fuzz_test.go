package adapt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// FuzzPlanInput feeds arbitrary bytes through what `fleet-role plan` does
// with its input: read the List, build the snapshot, plan. Nothing may
// panic, every refusal is ErrInput, and a plan read from the same input
// twice is the same plan.
func FuzzPlanInput(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "..", "docs", "examples", "*.json"))
	for _, path := range examples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"kind":"List","items":[]}`))
	f.Add([]byte(`{"items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","annotations":{"fleet-role.io/probe":"{}"}}}]}`))
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cfg := swapplan.Config{ProbePeriod: time.Minute, Bounds: swapplan.Bounds{Join: time.Minute}}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ReadList(bytes.NewReader(data), api.Namespace)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("a refusal that is not ErrInput: %v", err)
			}
			return
		}
		snap, _ := Build(in, cfg, labels.Everything(), now)
		a := swapplan.Next(snap)
		b := swapplan.Next(snap)
		if a.Action.Type != b.Action.Type || a.Reason != b.Reason || a.Step != b.Step {
			t.Fatalf("two plans of one snapshot differ: %+v and %+v", a, b)
		}
	})
}
