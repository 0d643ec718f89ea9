package plan_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

var update = flag.Bool("update", false, "rewrite docs/examples from the builders")

// examples are the clusters in docs/examples, which docs/plan-format.md
// walks through; each is checked against the builder that wrote it and
// against the answer the documentation gives.
var examples = []struct {
	file  string
	build func() *cluster
	check func(t *testing.T, p swapplan.Plan)
}{
	{"idle.json", newCluster, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionNone, "", "", "no swap: no voter is unfit")
	}},
	{"dry-run-decision.json", func() *cluster {
		c := newCluster()
		c.status.Verdicts = map[string]api.Verdict{
			"v2": {State: api.VerdictUnfit, Score: 31, Samples: 25, Bad: 21, FsyncP99Ms: 31, Reason: "fsync p99 over 10 ms in 21 of 25 samples"},
			"s1": {State: api.VerdictFit, Score: 2.5, Samples: 25, FsyncP99Ms: 2.5},
		}
		c.unhealthy("v2")
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionNone, "", "", "dry run: would swap v2 for s1")
	}},
	{"gates-held.json", func() *cluster {
		c := newCluster()
		rec := c.swap("v1", "s1", api.StepGates, 2*time.Minute)
		c.promoted(rec, "s1", 4*time.Minute)
		c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
		c.unhealthy("v3")
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionNone, "", api.StepGates, "the outgoing voter v1 is not touched: v3's probe says unhealthy")
	}},
	{"step-down.json", func() *cluster {
		c := newCluster()
		rec := c.swap("v1", "s1", api.StepDrainOut, time.Minute)
		c.promoted(rec, "s1", 10*time.Minute)
		c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
		c.cordon("v1", rec.ID)
		c.pods = slices.DeleteFunc(c.pods, func(p *corev1.Pod) bool { return p.Spec.NodeName == "v1" && p.Namespace == "apps" })
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionStepDown, "v1", api.StepStepDown, "asking the outgoing voter v1 to step down")
	}},
	{"mid-swap.json", func() *cluster {
		c := newCluster()
		atStepDown(c)
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionNone, "", api.StepStepDown, "the removal waits for the step-down while v1 is Ready")
	}},
	{"remove-member.json", steppedDown, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionRemoveMember, "v1", api.StepRemoveMember, "asking k3s to remove the member of v1; 3 remaining voter(s) vote")
	}},
	{"removal-slow-voter.json", func() *cluster {
		c := steppedDown()
		c.unhealthy("v2")
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionRemoveMember, "v1", api.StepRemoveMember, "asking k3s to remove the member of v1; 3 remaining voter(s) vote")
	}},
	{"removal-held.json", func() *cluster {
		c := steppedDown()
		c.unanswering("v2")
		c.unhealthy("v3")
		return c
	}, func(t *testing.T, p swapplan.Plan) {
		assertAction(t, p, api.ActionNone, "", api.StepRemoveMember,
			"removal held: 2 remaining voter(s) vote, not a majority (3) of the 4 members with v1's, which is down: v2's probe says unhealthy: etcd did not answer within 2s")
	}},
}

// steppedDown: v1, asked to step down (atStepDown), reported it done.
func steppedDown() *cluster {
	c := newCluster()
	rec := atStepDown(c)
	c.report(rec, "v1", api.RequestStepDown, api.StateDone, func(r *api.Report) { r.RequestAt = ptr.To(c.now.Add(-time.Minute)) })
	return c
}

func TestExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "examples")
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			path := filepath.Join(dir, ex.file)
			want := ex.build().list()
			if *update {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.WriteFile(path, want, 0o644))
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err, "run: go test ./tests/plan -run TestExamples -update")
			assert.Equal(t, string(want), string(got), "%s is out of date: go test ./tests/plan -run TestExamples -update", path)
			c := ex.build()
			ex.check(t, planOf(t, c))
		})
	}
}
