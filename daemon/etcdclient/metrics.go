package etcdclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/fleet-role/fleet-role/api"
)

// The member's latency histograms the controller judges a voter by.
const (
	walFsyncMetric      = "etcd_disk_wal_fsync_duration_seconds"
	backendCommitMetric = "etcd_disk_backend_commit_duration_seconds"
)

// Latencies reads the local member's WAL fsync and backend commit
// histograms from its /metrics, on its client URL with the client's
// certificates, as they stand (cumulative since it started).
func (c *Client) Latencies(ctx context.Context) (api.EtcdLatencies, error) {
	hc, err := c.metricsClient()
	if err != nil {
		return api.EtcdLatencies{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	url := strings.TrimSuffix(c.cfg.Endpoint, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return api.EtcdLatencies{}, fmt.Errorf("etcd metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return api.EtcdLatencies{}, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.EtcdLatencies{}, fmt.Errorf("etcd metrics: GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return api.EtcdLatencies{}, fmt.Errorf("etcd metrics: %w", err)
	}
	var l api.EtcdLatencies
	for name, h := range map[string]**api.Histogram{walFsyncMetric: &l.WALFsync, backendCommitMetric: &l.BackendCommit} {
		f := families[name]
		if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram() == nil {
			return api.EtcdLatencies{}, fmt.Errorf("etcd metrics: no histogram %s", name)
		}
		*h = histogram(f.GetMetric()[0].GetHistogram())
	}
	return l, nil
}

// histogram is a Prometheus histogram on the wire: its finite buckets.
func histogram(h *dto.Histogram) *api.Histogram {
	out := &api.Histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		out.Buckets = append(out.Buckets, api.Bucket{LE: b.GetUpperBound(), Count: b.GetCumulativeCount()})
	}
	return out
}

// metricsClient is the HTTP client of the member's /metrics, made once,
// with the certificates its gRPC client uses.
func (c *Client) metricsClient() (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http != nil {
		return c.http, nil
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1}
	if strings.HasPrefix(c.cfg.Endpoint, "https://") {
		tlsInfo := transport.TLSInfo{CertFile: c.cfg.CertFile, KeyFile: c.cfg.KeyFile, TrustedCAFile: c.cfg.CAFile}
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		tr.TLSClientConfig = tc.Clone()
		tr.TLSClientConfig.MinVersion = max(tr.TLSClientConfig.MinVersion, tls.VersionTLS12)
	}
	c.http = &http.Client{Transport: tr}
	return c.http, nil
}
