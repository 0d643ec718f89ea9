package deployment

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
)

// TemplateHash is the pod template's hash, the name of its revision, as
// the Deployment controller computes it for the pod-template-hash label
// and its ReplicaSet's name: FNV-32a of the template as dump.ForHash
// prints it, then the collision count, then rand.SafeEncodeString.
// kubernetes: pkg/controller/controller_utils.go, ComputeHash, and
// pkg/util/hash, DeepHashObject.
func TemplateHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(*template))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		_, _ = h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// fenceposts are the rolling update's maxSurge and maxUnavailable for
// desired replicas: a percentage of surge rounded up, of unavailable
// down, and unavailable 1 when both come to 0. kubernetes:
// pkg/controller/deployment/util/deployment_util.go, ResolveFenceposts.
func fenceposts(ru *appsv1.RollingUpdateDeployment, desired int) (surge, unavailable int, err error) {
	zero := intstr.FromInt32(0)
	var maxSurge, maxUnavailable *intstr.IntOrString
	if ru != nil {
		maxSurge, maxUnavailable = ru.MaxSurge, ru.MaxUnavailable
	}
	surge, err = intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, zero), desired, true)
	if err != nil {
		return 0, 0, err
	}
	unavailable, err = intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, zero), desired, false)
	if err != nil {
		return 0, 0, err
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, min(unavailable, desired), nil
}

// member is a replica as the rollout sees it.
type member struct {
	name      string
	created   time.Time
	ready     bool
	available bool
	// readySince is when it turned ready.
	readySince time.Time
}

// deletionOrder sorts replicas in the order a ReplicaSet deletes its
// Pods when it scales down: not ready before ready, ready for a shorter
// time before a longer one, newer before older. kubernetes:
// pkg/controller/controller_utils.go, ActivePods (Less).
func deletionOrder(ms []member) []member {
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b member) int {
		if a.ready != b.ready {
			if !a.ready {
				return -1
			}
			return 1
		}
		if a.ready {
			if c := b.readySince.Compare(a.readySince); c != 0 {
				return c // the later readySince, ready for a shorter time, first
			}
		}
		return cmp.Compare(b.created.UnixNano(), a.created.UnixNano())
	})
	return out
}

func countAvailable(ms []member) int {
	n := 0
	for _, m := range ms {
		if m.available {
			n++
		}
	}
	return n
}

// rolling is one pass of a rolling update over the replicas of the
// current revision (newer) and of the earlier ones (older), as one sync
// of the Deployment controller does it, the ReplicaSets being the
// replicas of each revision: it says how many replicas of the current
// revision to start, and which replicas to stop. kubernetes:
// pkg/controller/deployment/rolling.go, rolloutRolling.
//
//   - The current revision scales up to at most desired+surge replicas in
//     all, and never past desired (reconcileNewReplicaSet,
//     deploymentutil.NewRSNewReplicas); past desired it scales down. A
//     pass that scales it does nothing else.
//   - Then the earlier revisions scale down, by at most all - minAvailable
//   - the current revision's unavailable replicas (minAvailable =
//     desired - unavailable): first their replicas that are not
//     available (cleanupUnhealthyReplicas), then as many more as leaves
//     minAvailable available (scaleDownOldReplicaSetsForRollingUpdate).
//     Note: the earlier revisions are one pool here, not a ReplicaSet
//     each taken oldest first.
func rolling(desired, surge, unavailable int, newer, older []member) (start int, stop []string) {
	total := len(newer) + len(older)
	switch {
	case len(newer) > desired:
		for _, m := range deletionOrder(newer)[:len(newer)-desired] {
			stop = append(stop, m.name)
		}
		return 0, stop
	case len(newer) < desired:
		if up := min(desired+surge-total, desired-len(newer)); up > 0 {
			return up, nil
		}
	}
	if len(older) == 0 {
		return 0, nil
	}
	minAvailable := desired - unavailable
	newUnavailable := len(newer) - countAvailable(newer)
	maxScaledDown := total - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return 0, nil
	}
	var left []member
	for _, m := range deletionOrder(older) {
		if !m.available && len(stop) < maxScaledDown {
			stop = append(stop, m.name)
			continue
		}
		left = append(left, m)
	}
	available := countAvailable(newer) + countAvailable(left)
	if available <= minAvailable {
		return 0, stop
	}
	for i, m := range deletionOrder(left) {
		if i >= available-minAvailable {
			break
		}
		stop = append(stop, m.name)
	}
	return 0, stop
}

// recreate is one pass of a Recreate rollout: the earlier revisions'
// replicas stop first, and the current revision's start once none is
// left. kubernetes: pkg/controller/deployment/recreate.go, rolloutRecreate.
func recreate(desired int, newer, older []member) (start int, stop []string) {
	if len(older) > 0 {
		for _, m := range older {
			stop = append(stop, m.name)
		}
		return 0, stop
	}
	if len(newer) > desired {
		for _, m := range deletionOrder(newer)[:len(newer)-desired] {
			stop = append(stop, m.name)
		}
		return 0, stop
	}
	return desired - len(newer), nil
}
