package swapplan

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The quantile is defined for 0 < q < 1 alone; a rank that is a bucket's
// whole count falls in that bucket, as histogram_quantile's search for the
// first bucket whose count reaches the rank finds it, not in an empty one
// after it (whose interpolation would be 0/0).
func TestTheQuantileIsNoneOutsideZeroToOneAndARankThatFillsABucketFallsInIt(t *testing.T) {
	h := hist([]float64{1, 2, 4}, []uint64{50, 50, 100}, 100)
	assert.True(t, math.IsNaN(quantile(0, h)), "q 0")
	assert.True(t, math.IsNaN(quantile(1, h)), "q 1")
	assert.InDelta(t, 1, quantile(0.5, h), 1e-9, "the rank 50 is the first bucket's last, not the empty second's")
}

// Two samples with no observation between them subtract to none, not to
// a restart; the sum is subtracted too.
func TestTheDeltaOfTwoEqualSamplesIsNoObservationAndTheSumsSubtract(t *testing.T) {
	a := hist([]float64{1, 2}, []uint64{10, 15}, 20)
	a.Sum = 1.5
	d, ok := histogramDelta(&a, &a)
	assert.True(t, ok, "no write between two samples is no restart")
	assert.Equal(t, uint64(0), d.Count)
	b := hist([]float64{1, 2}, []uint64{40, 55}, 70)
	b.Sum = 4
	d, ok = histogramDelta(&a, &b)
	assert.True(t, ok)
	assert.InDelta(t, 2.5, d.Sum, 1e-9)
}
