package swapplan

import (
	"math"

	"github.com/fleet-role/fleet-role/api"
)

// histogramDelta is b less a, bucket by bucket: the observations made
// between the two samples of one cumulative histogram. ok is false when
// they cannot be subtracted: either missing, other bucket bounds, or a
// count that fell (the member restarted, its counters began again).
func histogramDelta(a, b *api.Histogram) (api.Histogram, bool) {
	if a == nil || b == nil || len(a.Buckets) != len(b.Buckets) || b.Count < a.Count {
		return api.Histogram{}, false
	}
	d := api.Histogram{Count: b.Count - a.Count, Sum: b.Sum - a.Sum, Buckets: make([]api.Bucket, len(b.Buckets))}
	for i := range b.Buckets {
		if a.Buckets[i].LE != b.Buckets[i].LE || b.Buckets[i].Count < a.Buckets[i].Count {
			return api.Histogram{}, false
		}
		d.Buckets[i] = api.Bucket{LE: b.Buckets[i].LE, Count: b.Buckets[i].Count - a.Buckets[i].Count}
	}
	return d, true
}

// quantile is the q-quantile (0 < q < 1) of a histogram's observations,
// in its unit, by Prometheus's histogram_quantile rules
// (promql/quantile.go, bucketQuantile): the rank q·count falls in the
// first bucket whose cumulative count reaches it, and the value is
// interpolated linearly within that bucket, from the bound of the bucket
// below (0 for the first bucket, whose bound is positive) to its own. A
// rank in the +Inf bucket gives the highest finite bound; a histogram of
// no observation, or of no finite bucket, has none (NaN).
func quantile(q float64, h api.Histogram) float64 {
	if h.Count == 0 || len(h.Buckets) == 0 || q <= 0 || q >= 1 {
		return math.NaN()
	}
	rank := q * float64(h.Count)
	b := 0
	for b < len(h.Buckets) && float64(h.Buckets[b].Count) < rank {
		b++
	}
	if b == len(h.Buckets) {
		return h.Buckets[b-1].LE // in the +Inf bucket
	}
	end := h.Buckets[b].LE
	if b == 0 && end <= 0 {
		return end
	}
	start, below := 0.0, 0.0
	if b > 0 {
		start, below = h.Buckets[b-1].LE, float64(h.Buckets[b-1].Count)
	}
	count := float64(h.Buckets[b].Count) - below
	return start + (end-start)*((rank-below)/count)
}
