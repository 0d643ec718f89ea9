package api_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
)

func TestAProbeWhoseHistogramsAreNotCumulativeOrNotAscendingIsInvalid(t *testing.T) {
	probe := func(h api.Histogram) api.Probe {
		return api.Probe{At: time.Now(), Period: api.Duration(time.Minute), EtcdLatencies: &api.EtcdLatencies{WALFsync: &h}}
	}
	good := api.Histogram{Count: 5, Buckets: []api.Bucket{{LE: 0.001, Count: 2}, {LE: 0.002, Count: 4}}}
	assert.NoError(t, probe(good).Validate())
	for _, tc := range []struct {
		name string
		h    api.Histogram
		want string
	}{
		{"a count that falls", api.Histogram{Count: 5, Buckets: []api.Bucket{{LE: 0.001, Count: 4}, {LE: 0.002, Count: 2}}},
			`field "etcdLatencies.walFsync": buckets[1].count: 2 is less than the bucket before's 4`},
		{"bounds not ascending", api.Histogram{Count: 5, Buckets: []api.Bucket{{LE: 0.002, Count: 2}, {LE: 0.001, Count: 4}}},
			`field "etcdLatencies.walFsync": buckets[1].le: 0.001 is not a finite bound above the one before`},
		{"an infinite bound", api.Histogram{Count: 5, Buckets: []api.Bucket{{LE: math.Inf(1), Count: 5}}},
			`buckets[0].le: +Inf is not a finite bound`},
		{"a count under its last bucket's", api.Histogram{Count: 3, Buckets: []api.Bucket{{LE: 0.001, Count: 4}}},
			`count: 3 is less than the last bucket's 4`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, probe(tc.h).Validate(), tc.want)
		})
	}
}

func TestAProbeWhoseK3sConfigHashesAreNotSHA256InHexIsInvalid(t *testing.T) {
	probe := func(c api.K3sConfig) api.Probe {
		return api.Probe{At: time.Now(), Period: api.Duration(time.Minute), K3sConfig: &c}
	}
	hash := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	assert.NoError(t, probe(api.K3sConfig{TokenCAHash: hash, ServerCAHash: hash}).Validate())
	assert.NoError(t, probe(api.K3sConfig{}).Validate(), "no hash known")
	assert.EqualError(t, probe(api.K3sConfig{TokenCAHash: "abc"}).Validate(), `field "k3sConfig.tokenCAHash": "abc" is not a sha256 in hex`)
	assert.EqualError(t, probe(api.K3sConfig{ServerCAHash: hash + "0"}).Validate(), `field "k3sConfig.serverCAHash": "`+hash+`0" is not a sha256 in hex`)
}
