package swapplan

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
)

func hist(les []float64, counts []uint64, total uint64) api.Histogram {
	h := api.Histogram{Count: total}
	for i, le := range les {
		h.Buckets = append(h.Buckets, api.Bucket{LE: le, Count: counts[i]})
	}
	return h
}

// The values are histogram_quantile's on the same buckets, worked by its
// rules: linear within the bucket the rank falls in, from the bound below
// (0 under the first).
func TestTheQuantileOfAHistogramInterpolatesWithinTheBucketOfItsRankAsHistogramQuantileDoes(t *testing.T) {
	h := hist([]float64{1, 2, 4}, []uint64{50, 90, 100}, 100)
	for _, tc := range []struct {
		name string
		q    float64
		want float64
	}{
		{"the rank 99 falls in (2,4], 9 of its 10", 0.99, 3.8},
		{"the rank 50 is the first bucket's last, its bound", 0.5, 1},
		{"the rank 25 is halfway up the first bucket, from 0", 0.25, 0.5},
		{"the rank 70 is halfway up the second", 0.7, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, quantile(tc.q, h), 1e-9)
		})
	}
}

func TestARankInTheInfBucketGivesTheHighestFiniteBound(t *testing.T) {
	assert.Equal(t, 2.0, quantile(0.99, hist([]float64{1, 2}, []uint64{50, 90}, 100)))
}

func TestAHistogramOfNoObservationHasNoQuantile(t *testing.T) {
	assert.True(t, math.IsNaN(quantile(0.99, hist([]float64{1, 2}, []uint64{0, 0}, 0))))
	assert.True(t, math.IsNaN(quantile(0.99, api.Histogram{Count: 3})), "no finite bucket")
}

func TestAFirstBucketWithANonPositiveBoundGivesItsBound(t *testing.T) {
	assert.Equal(t, -1.0, quantile(0.5, hist([]float64{-1, 2}, []uint64{60, 100}, 100)))
}

func TestTheDeltaOfTwoSamplesIsTheObservationsBetweenThemAndNoneAcrossARestart(t *testing.T) {
	a := hist([]float64{1, 2}, []uint64{10, 15}, 20)
	b := hist([]float64{1, 2}, []uint64{40, 55}, 70)
	d, ok := histogramDelta(&a, &b)
	assert.True(t, ok)
	assert.Equal(t, hist([]float64{1, 2}, []uint64{30, 40}, 50), d)

	restarted := hist([]float64{1, 2}, []uint64{3, 3}, 30)
	_, ok = histogramDelta(&a, &restarted)
	assert.False(t, ok, "a bucket's count fell: the member restarted")
	_, ok = histogramDelta(&b, &a)
	assert.False(t, ok, "the count fell")
	fewer := hist([]float64{1, 2}, []uint64{10, 15}, 18)
	_, ok = histogramDelta(&a, &fewer)
	assert.False(t, ok, "the +Inf bucket's count fell, the others held")
	other := hist([]float64{1, 4}, []uint64{40, 55}, 70)
	_, ok = histogramDelta(&a, &other)
	assert.False(t, ok, "other bounds")
	_, ok = histogramDelta(nil, &b)
	assert.False(t, ok)
}
