package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/wire/wiretest"
)

// scrape returns the node's metrics as Prometheus's text format has them.
func scrape(t *testing.T, n *Node) string {
	t.Helper()
	srv := httptest.NewServer(n.MetricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d, %v", resp.StatusCode, err)
	}
	return string(body)
}

// metricValue returns the value of the sample of metric whose labels
// include all of labels ("name=\"value\"" each), summed over the samples
// that do; ok is false if none does.
func metricValue(text, metric string, labels ...string) (sum float64, ok bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `(\{[^}]*\})? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		all := true
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				all = false
			}
		}
		if !all {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err == nil {
			sum += v
			ok = true
		}
	}
	return sum, ok
}

// A put and a get through a node show in its metrics: the requests by
// method and outcome with their latencies, the blocks' bytes by peer
// class, the blocks held, the key cluster's Raft state, the log hosted,
// and libp2p's own metrics. A node without Config.Metrics serves none.
func TestMetricsAfterPutAndGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), NoSocket: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Logger: testLogger(t), Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	before := scrape(t, n)
	if v, ok := metricValue(before, "spindle_block_bytes_total", `direction="in"`, `peer="user"`); ok && v != 0 {
		t.Fatalf("block bytes in before any put: %v", v)
	}

	ann := fwdDial(t, n, newKeys(t, "ann@example.com"))
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, ann, "ann@example.com/f", data)
	if _, err := ann.Lookup(ctx, "ann@example.com/missing", false); err == nil {
		t.Fatal("lookup of a missing file succeeded")
	}

	text := scrape(t, n)
	checks := []struct {
		metric string
		labels []string
		min    float64
	}{
		{"spindle_requests_total", []string{`protocol="client"`, `method="dir.append`, `outcome="ok"`}, 1},
		{"spindle_requests_total", []string{`protocol="client"`, `method="dir.lookup"`, `outcome="not_exist"`}, 1},
		{"spindle_requests_total", []string{`method="key.put"`, `outcome="ok"`}, 1},
		{"spindle_request_duration_seconds_count", []string{`method="dir.lookup"`}, 2},
		{"spindle_block_bytes_total", []string{`direction="in"`, `peer="user"`}, float64(len(data))},
		{"spindle_block_bytes_total", []string{`direction="out"`, `peer="user"`}, float64(len(data))},
		{"spindle_blocks_held", nil, 1},
		{"spindle_block_store_bytes", nil, float64(len(data))},
		{"spindle_raft_leader", nil, 1},
		{"spindle_raft_voters", nil, 1},
		{"spindle_dirlog_head", []string{`user="ann@example.com"`, `role="sequencer"`}, 1},
		{"spindle_leases", []string{`what="held"`}, 0},
	}
	for _, c := range checks {
		v, ok := metricValue(text, c.metric, c.labels...)
		if !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", c.metric, c.labels, v, ok, c.min)
		}
	}
	if !strings.Contains(text, "\nlibp2p_") {
		t.Error("libp2p's own metrics are missing")
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}

	// A made-up method counts as unknown: peers cannot make up labels.
	call(t, n, false, &wiretest.Request{Method: "made.up.method"})
	if v, ok := metricValue(scrape(t, n), "spindle_requests_total", `method="unknown"`); !ok || v < 1 {
		t.Errorf("a made-up method is not counted as unknown: %v %v", v, ok)
	}
	if strings.Contains(scrape(t, n), "made.up.method") {
		t.Error("a made-up method name became a label")
	}

	plain := netNode(t, "", nil)
	defer plain.Close()
	if plain.MetricsHandler() != nil {
		t.Error("a node without Config.Metrics serves metrics")
	}
}
