package etcdclient

import (
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTheSnapshotChecksumIsVerifiedAcrossChunks(t *testing.T) {
	db := make([]byte, 4096*3)
	for i := range db {
		db[i] = byte(i * 7)
	}
	sum := sha256.Sum256(db)
	stream := append(append([]byte(nil), db...), sum[:]...)
	feed := func(b []byte, chunk int) bool {
		v := &verifier{h: sha256.New()}
		for len(b) > 0 {
			n := min(chunk, len(b))
			v.Write(b[:n])
			b = b[n:]
		}
		return v.ok()
	}
	for _, chunk := range []int{1, 7, 31, 32, 33, 4096, len(stream)} {
		assert.True(t, feed(stream, chunk), "whole stream in chunks of %d", chunk)
	}
	corrupt := append([]byte(nil), stream...)
	corrupt[100] ^= 1
	assert.False(t, feed(corrupt, 512), "a flipped byte")
	assert.False(t, feed(stream[:len(stream)-1], 512), "a truncated stream")
	assert.False(t, feed(sum[:16], 512), "shorter than a checksum")
}

func TestAClientOfAHostWithoutEtcdOrItsCertificatesIsMadeAndSaysSoOnUse(t *testing.T) {
	c, err := New(Config{Endpoint: "https://127.0.0.1:2379", CAFile: "/nonexistent/ca.crt", CertFile: "/nonexistent/c.crt", KeyFile: "/nonexistent/c.key"})
	if err != nil {
		t.Fatalf("an agent host has no etcd certificates; its client is still made: %v", err)
	}
	defer c.Close()
	_, err = c.Members(t.Context())
	assert.ErrorContains(t, err, "etcd TLS")
}
