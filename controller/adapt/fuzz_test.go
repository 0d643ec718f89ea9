package adapt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// FuzzPlanInput feeds arbitrary bytes through what `fleet-role plan` does
// with its input: read the List, build the snapshot, plan. Nothing may
// panic, every refusal is ErrInput, and a plan read from the same input
// twice is the same plan; and the plan is safe: no action aimed at a Node
// the input does not have, no removal that would leave the voting members
// short of a quorum that is up (removalKeepsQuorum).
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
		if a.Action.Node != "" && !slices.ContainsFunc(snap.Nodes, func(n swapplan.Node) bool { return n.Name == a.Action.Node }) {
			t.Fatalf("%s aimed at %s, which the input has no Node of: %s", a.Action.Type, a.Action.Node, a.Reason)
		}
		if err := removalKeepsQuorum(snap, a.Action); err != nil {
			t.Fatalf("%s %s: %v: %s", a.Action.Type, a.Action.Node, err, a.Reason)
		}
	})
}

// removalKeepsQuorum is the quorum oracle on a snapshot's own evidence,
// over the voting members the Nodes' samples list (a member any list says
// votes). For the removal of a swap's outgoing voter, which is down (its
// server stopped, or it unreachable), the members less it must be a
// majority of the members with it, each a Node Ready with a fresh (two
// periods) sample that says healthy or only slow (no error): etcd can
// then commit the removal, which never lowers the failures it survives.
// For any other removal (the candidate's, running), the members less the
// one removed must have a quorum of their own, each with a fresh healthy
// sample. A learner counts for nothing; a member with no Node is down.
func removalKeepsQuorum(s swapplan.Snapshot, a swapplan.Action) error {
	var gone string // the member removed, or its Node's name
	outgoing := false
	switch a.Type {
	case api.ActionRemoveMember:
		gone = a.Node
		outgoing = s.Lease.Swap != nil && s.Lease.Swap.Out == a.Node
	case api.ActionRemoveByVoter:
		gone = a.Request.Member
	default:
		return nil
	}
	node := func(member string) *swapplan.Node {
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if n.MemberName == member || (n.Probe != nil && n.Probe.Member == member) {
				return n
			}
		}
		if i := strings.LastIndexByte(member, '-'); i > 0 {
			for j := range s.Nodes {
				if s.Nodes[j].Name == member[:i] {
					return &s.Nodes[j]
				}
			}
		}
		return nil
	}
	voting := map[string]bool{}
	for _, n := range s.Nodes {
		if n.Probe == nil {
			continue
		}
		for _, m := range n.Probe.Members {
			if !m.Learner {
				voting[m.Name] = true
			}
		}
	}
	var voters, up int
	for m := range voting {
		n := node(m)
		if m == gone || (n != nil && n.Name == gone) {
			if outgoing {
				voters++ // a member still, down
			}
			continue
		}
		voters++
		if n == nil || !n.Ready || n.Probe == nil || (!n.Probe.Healthy && !(outgoing && n.Probe.Error == "")) {
			continue
		}
		period := time.Duration(n.Probe.Period)
		if period <= 0 {
			period = s.Config.ProbePeriod
		}
		if s.Now.Sub(n.Probe.At) <= 2*period {
			up++
		}
	}
	if outgoing && up < swapplan.Quorum(voters) {
		return fmt.Errorf("%d of the %d voting members with the outgoing one, down, are Ready with a fresh sample healthy or only slow, a majority is %d", up, voters, swapplan.Quorum(voters))
	}
	if up < swapplan.Quorum(voters) {
		return fmt.Errorf("%d of the %d voting members left are Ready with a fresh healthy sample, a quorum is %d", up, voters, swapplan.Quorum(voters))
	}
	return nil
}

// testdata reads api's example of a wire document.
func testdata(f *testing.F, name string) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}

// problems splits the error of a conversion into the problems it joins.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// named says whether exactly one of the problems begins with prefix.
func named(probs []string, prefix string) bool {
	n := 0
	for _, p := range probs {
		if strings.HasPrefix(p, prefix) {
			n++
		}
	}
	return n == 1
}

// sameJSON says whether a and b write the same JSON.
func sameJSON(t *testing.T, a, b any) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzNodeAnnotations feeds arbitrary values of the annotations the
// controller reads from a Node. Converting the same Node twice gives the
// same result; a value that does not read is left out and named in
// exactly one problem, which names its annotation; a value read, written
// back, reads as the same value.
func FuzzNodeAnnotations(f *testing.F) {
	f.Add(testdata(f, "node-request-promote.json"), testdata(f, "node-report-promote.json"), testdata(f, "node-probe-server.json"), "true")
	f.Add(testdata(f, "node-request-step-down.json"), testdata(f, "node-report-refused.json"), testdata(f, "node-probe-standby.json"), "")
	f.Add(testdata(f, "node-request-remove-member.json"), testdata(f, "node-report-snapshot.json"), `{"at":"2026-11-30T12:00:00Z"}`, "swap-1")
	f.Add(`{"v":1}`, testdata(f, "node-report-finish.json"), `{"period":1}`, "\xff")
	f.Fuzz(func(t *testing.T, request, report, probe, other string) {
		n := &corev1.Node{}
		n.Name = "h1"
		n.Annotations = map[string]string{
			api.AnnotationRequest: request, api.AnnotationReport: report, api.AnnotationProbe: probe,
			api.AnnotationCordonedBy: other, api.AnnotationMemberGone: other, api.AnnotationEtcdRemove: other,
			api.AnnotationEtcdNodeName: other, api.AnnotationEtcdRemovedNodeName: other,
		}
		out, err := Node(n)
		again, errAgain := Node(n)
		if !reflect.DeepEqual(out, again) || errText(err) != errText(errAgain) {
			t.Fatalf("one Node read twice differs:\n%+v %v\n%+v %v", out, err, again, errAgain)
		}
		probs := problems(err)
		read := map[string]any{api.AnnotationRequest: out.Request, api.AnnotationReport: out.Report, api.AnnotationProbe: out.Probe}
		failed := 0
		for ann, v := range read {
			left := reflect.ValueOf(v).IsNil()
			if left {
				failed++
			}
			if left != named(probs, "node/h1: annotation "+ann+": ") {
				t.Fatalf("annotation %s read as %+v, and the problems are %q", ann, v, probs)
			}
		}
		if failed != len(probs) {
			t.Fatalf("%d annotations left out, and %d problems: %q", failed, len(probs), probs)
		}
		if out.CordonedBy != other || out.MemberGone != other || out.MemberName != other || out.RemovedMember != other ||
			out.RemoveRequested != (other == "true") {
			t.Fatalf("the plain annotations read as %+v from %q", out, other)
		}

		// What was read, written back, reads as the same.
		m := &corev1.Node{}
		m.Name = n.Name
		m.Annotations = map[string]string{}
		for ann, v := range read {
			if !reflect.ValueOf(v).IsNil() {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatalf("annotation %s read does not write: %v", ann, err)
				}
				m.Annotations[ann] = string(b)
			}
		}
		back, err := Node(m)
		if err != nil {
			t.Fatalf("the annotations read, written back, do not read: %v", err)
		}
		if !sameJSON(t, back.Request, out.Request) || !sameJSON(t, back.Report, out.Report) || !sameJSON(t, back.Probe, out.Probe) {
			t.Fatalf("the annotations read, written back, read otherwise:\n%+v\n%+v", out, back)
		}
	})
}

// FuzzStatusConfigMap feeds arbitrary values of the status ConfigMap's
// keys. Reading the same ConfigMap twice gives the same result; each key
// reads as it reads alone, so a bad one spoils no other; a key that does
// not read is left out whole and named in exactly one problem; a value
// read, written back, reads as the same value.
func FuzzStatusConfigMap(f *testing.F) {
	f.Add(testdata(f, "status.json"), testdata(f, "request.json"), testdata(f, "pause.json"), testdata(f, "cancel.json"))
	f.Add(testdata(f, filepath.Join("v1", "status.json")), testdata(f, "request-forced.json"), "", " ")
	f.Add(`{"swap":{"id":"x"}}`, `{"out":"a","in":"a"}`, `{"at":"2026-11-30T12:00:00Z"}`, `{"swap":1}`)
	keys := []string{api.StatusKey, api.RequestKey, api.PauseKey, api.CancelKey}
	f.Fuzz(func(t *testing.T, status, request, pause, cancel string) {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = api.Namespace, api.StatusConfigMap
		cm.Data = map[string]string{api.StatusKey: status, api.RequestKey: request, api.PauseKey: pause, api.CancelKey: cancel}
		st, c, err := Status(cm)
		st2, c2, err2 := Status(cm)
		if !reflect.DeepEqual(st, st2) || !reflect.DeepEqual(c, c2) || errText(err) != errText(err2) {
			t.Fatalf("one ConfigMap read twice differs: %v and %v", err, err2)
		}
		probs := problems(err)
		got := map[string]any{api.StatusKey: st, api.RequestKey: c.Request, api.PauseKey: c.Pause, api.CancelKey: c.Cancel}
		failed := 0
		for _, key := range keys {
			alone := cm.DeepCopy()
			alone.Data = map[string]string{key: cm.Data[key]}
			ast, ac, aerr := Status(alone)
			want := map[string]any{api.StatusKey: ast, api.RequestKey: ac.Request, api.PauseKey: ac.Pause, api.CancelKey: ac.Cancel}[key]
			if !reflect.DeepEqual(got[key], want) {
				t.Fatalf("key %s read with the others is %+v, alone %+v", key, got[key], want)
			}
			bad := aerr != nil
			if bad {
				failed++
				if v := reflect.ValueOf(got[key]); key == api.StatusKey && !reflect.DeepEqual(got[key], api.Status{}) || key != api.StatusKey && !v.IsNil() {
					t.Fatalf("key %s does not read, and was half read: %+v", key, got[key])
				}
			}
			if bad != named(probs, "configmap/"+api.Namespace+"/"+api.StatusConfigMap+": key "+key+": ") {
				t.Fatalf("key %s: alone it reads with %v; with the others the problems are %q", key, aerr, probs)
			}
		}
		if failed != len(probs) {
			t.Fatalf("%d keys do not read, and %d problems: %q", failed, len(probs), probs)
		}

		// What was read, written back, reads as the same. A status read
		// has a version; one left out has none.
		back := cm.DeepCopy()
		back.Data = map[string]string{}
		for key, v := range got {
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() || reflect.DeepEqual(v, api.Status{}) {
				continue
			}
			back.Data[key] = mustJSON(t, v)
		}
		bst, bc, err := Status(back)
		if err != nil {
			t.Fatalf("the keys read, written back, do not read: %v", err)
		}
		if !sameJSON(t, bst, st) || !sameJSON(t, bc, c) {
			t.Fatalf("the keys read, written back, read otherwise")
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzLease feeds arbitrary swap records to the regrade Lease's reading.
// A record that does not read is left out and named, the holder and the
// times read all the same; one read, written back, reads as the same.
func FuzzLease(f *testing.F) {
	f.Add(testdata(f, "lease-swap.json"), "fleet-role-controller")
	f.Add(testdata(f, "lease-swap-end.json"), "")
	f.Add(testdata(f, "lease-swap-stuck.json"), "regrade")
	f.Add(testdata(f, filepath.Join("v1", "lease-swap.json")), "\xff")
	f.Add(`{"id":"x","phase":"stuck"}`, "regrade")
	f.Fuzz(func(t *testing.T, swap, holder string) {
		l := &coordinationv1.Lease{}
		l.Namespace, l.Name = api.Namespace, api.LeaseName
		l.Annotations = map[string]string{api.AnnotationSwap: swap}
		secs := int32(60)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &holder, &secs
		out, err := Lease(l)
		again, err2 := Lease(l)
		if !reflect.DeepEqual(out, again) || errText(err) != errText(err2) {
			t.Fatalf("one Lease read twice differs: %+v %v, %+v %v", out, err, again, err2)
		}
		if out.Holder != holder || out.Duration != time.Minute {
			t.Fatalf("the Lease's holder and duration read as %q and %v", out.Holder, out.Duration)
		}
		if err != nil {
			if out.Swap != nil || !named(problems(err), "lease/"+api.Namespace+"/"+api.LeaseName+": annotation "+api.AnnotationSwap+": ") {
				t.Fatalf("a record that does not read is left out and named: %+v, %v", out.Swap, err)
			}
			return
		}
		if (out.Swap == nil) != (swap == "") {
			t.Fatalf("the record %q read as %+v", swap, out.Swap)
		}
		if out.Swap == nil {
			return
		}
		l.Annotations[api.AnnotationSwap] = mustJSON(t, out.Swap)
		back, err := Lease(l)
		if err != nil || !sameJSON(t, back.Swap, out.Swap) {
			t.Fatalf("the record read, written back, reads otherwise: %+v, %v", back.Swap, err)
		}
	})
}
