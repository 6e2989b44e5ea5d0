package node

// Prometheus metrics, for an operator who wants to watch a node that runs
// itself (spin node -metrics ADDR). They are off unless Config.Metrics
// is set, and served only where the operator says: they name the users
// whose logs the node hosts, which a node tells nobody else.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/p2p"
)

// A metrics holds a node's Prometheus registry and the metrics the node
// updates as it serves; the rest are read when scraped (collect).
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	blockBytes *prometheus.CounterVec
	blockOps   *prometheus.CounterVec
}

// newMetrics makes the registry of node n, with the Go runtime's and the
// process's own metrics.
func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spindle_requests_total",
			Help: "Requests answered by the node, by protocol (client, operator), method and outcome (ok, or the error's kind).",
		}, []string{"protocol", "method", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spindle_request_duration_seconds",
			Help:    "Time to answer a request, by protocol and method; for key.put on a key cluster member, the Raft commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100 µs to 26 s.
		}, []string{"protocol", "method"}),
		blockBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spindle_block_bytes_total",
			Help: "Bytes of blocks served (out) and taken (in) over the block protocol, by peer class: user (a signed-in client) or node (any other peer).",
		}, []string{"direction", "peer"}),
		blockOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spindle_block_requests_total",
			Help: "Block gets and puts answered over the block protocol, by peer class and outcome.",
		}, []string{"op", "peer", "outcome"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.blockBytes, m.blockOps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		nodeCollector{n})
	return m
}

// observe counts one request of method on protocol that took since and
// ended with err. Methods the table does not know count as "unknown",
// so that a peer cannot make up label values.
func (m *metrics) observe(protocol string, table *methodTable, method string, since time.Time, err error) {
	if m == nil {
		return
	}
	if _, ok := table.methods[method]; !ok {
		method = "unknown"
	}
	m.requests.WithLabelValues(protocol, method, outcome(err)).Inc()
	m.latency.WithLabelValues(protocol, method).Observe(time.Since(since).Seconds())
}

// outcome is the label of an error: "ok", or its kind.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, keyraft.ErrNotLeader) {
		return "not_leader"
	}
	if l, ok := kindLabels[spindle.KindOf(err)]; ok {
		return l
	}
	return "other"
}

// kindLabels are the outcome labels of error kinds.
var kindLabels = map[spindle.Kind]string{
	spindle.Invalid:       "invalid",
	spindle.Permission:    "permission",
	spindle.Private:       "private",
	spindle.NotExist:      "not_exist",
	spindle.Exist:         "exist",
	spindle.IO:            "io",
	spindle.Transient:     "transient",
	spindle.Internal:      "internal",
	spindle.CannotDecrypt: "cannot_decrypt",
	spindle.Integrity:     "integrity",
	spindle.IsDir:         "is_dir",
	spindle.NotDir:        "not_dir",
	spindle.NotEmpty:      "not_empty",
	spindle.BrokenLink:    "broken_link",
	spindle.Damaged:       "damaged",
	spindle.Full:          "full",
	spindle.Stale:         "stale",
}

// MetricsHandler returns the handler that serves the node's metrics in
// Prometheus's text format, or nil if Config.Metrics is off.
func (n *Node) MetricsHandler() http.Handler {
	if n.metrics == nil {
		return nil
	}
	return promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// metricsRegisterer returns the registry libp2p adds its own metrics to,
// or nil.
func (n *Node) metricsRegisterer() prometheus.Registerer {
	if n.metrics == nil {
		return nil
	}
	return n.metrics.reg
}

// countingBlocks is the block store the node serves over the block
// protocol, counting what passes through it by peer class.
type countingBlocks struct {
	spindle.BlockStore
	m    *metrics
	user func(peer.ID) bool
}

func (c countingBlocks) class(ctx context.Context) string {
	if p, ok := p2p.BlockPeer(ctx); ok && c.user(p) {
		return "user"
	}
	return "node"
}

func (c countingBlocks) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, err := c.BlockStore.Get(ctx, ref)
	class := c.class(ctx)
	c.m.blockOps.WithLabelValues("get", class, outcome(err)).Inc()
	c.m.blockBytes.WithLabelValues("out", class).Add(float64(len(data)))
	return data, err
}

// Recycle implements [blocks.Recycler] for the store it wraps, if that
// lends its buffers.
func (c countingBlocks) Recycle(block []byte) { recycle(c.BlockStore, block) }

func (c countingBlocks) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	ref, err := c.BlockStore.Put(ctx, data)
	class := c.class(ctx)
	c.m.blockOps.WithLabelValues("put", class, outcome(err)).Inc()
	if err == nil {
		c.m.blockBytes.WithLabelValues("in", class).Add(float64(len(data)))
	}
	return ref, err
}

// A nodeCollector reads the node's state when the metrics are scraped.
type nodeCollector struct{ n *Node }

var (
	descBlocks      = prometheus.NewDesc("spindle_blocks_held", "Blocks held in the node's store.", nil, nil)
	descBytes       = prometheus.NewDesc("spindle_block_store_bytes", "Bytes of the blocks held in the node's store.", nil, nil)
	descCache       = prometheus.NewDesc("spindle_cache_bytes", "Bytes in the cache of blocks fetched from other nodes.", nil, nil)
	descCacheBlocks = prometheus.NewDesc("spindle_cache_blocks", "Blocks in the cache of blocks fetched from other nodes.", nil, nil)
	descAnnounced   = prometheus.NewDesc("spindle_blocks_announced", "Blocks the node keeps announced as their provider.", nil, nil)
	descBacklog     = prometheus.NewDesc("spindle_repair_backlog_blocks", "Blocks found short of their copies and not fixed yet.", nil, nil)
	descMissing     = prometheus.NewDesc("spindle_repair_missing_copies", "Copies the blocks of the repair backlog lack.", nil, nil)
	descRepair      = prometheus.NewDesc("spindle_repair_total", "Repair events since the start: checked, short, pushed, fixed, failed.", []string{"event"}, nil)
	descRefused     = prometheus.NewDesc("spindle_replica_refused_total", "Copies pushed by other nodes and refused, for any reason (all) or for the hold limit (full).", []string{"why"}, nil)
	descProofs      = prometheus.NewDesc("spindle_proofs_failed_total", "Challenges of holding that other nodes failed or did not answer.", nil, nil)
	descPeers       = prometheus.NewDesc("spindle_peers_connected", "Peers connected.", nil, nil)
	descDHT         = prometheus.NewDesc("spindle_dht_routing_table_peers", "Peers in the DHT's routing table.", nil, nil)
	descLeases      = prometheus.NewDesc("spindle_leases", "Leases held (held), blocks they keep (leased), blocks without a lease past the grace (collectable) and within it (unleased), leases renewed in the last round (renewed).", []string{"what"}, nil)
	descRaftLeader  = prometheus.NewDesc("spindle_raft_leader", "1 if this node is the key cluster's leader, 0 if a follower; absent if it is no member.", nil, nil)
	descRaftIndex   = prometheus.NewDesc("spindle_raft_index", "The key cluster's Raft log index on this member: last (held) and applied.", []string{"which"}, nil)
	descRaftTerm    = prometheus.NewDesc("spindle_raft_term", "The key cluster's Raft term.", nil, nil)
	descRaftVoters  = prometheus.NewDesc("spindle_raft_voters", "Voters of the key cluster.", nil, nil)
	descLogHead     = prometheus.NewDesc("spindle_dirlog_head", "Sequence number of the head of each directory log the node hosts or mirrors.", []string{"user", "role"}, nil)
	descLogLag      = prometheus.NewDesc("spindle_dirlog_mirror_lag", "Entries a mirrored directory log is behind the dir host it copies from, when it last answered.", []string{"user"}, nil)
	descLogErr      = prometheus.NewDesc("spindle_dirlog_pull_failing", "1 if the last pull of a mirrored directory log failed.", []string{"user"}, nil)
)

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descBytes, descCache, descCacheBlocks, descAnnounced, descBacklog, descMissing, descRepair, descRefused, descProofs, descPeers, descDHT, descLeases, descRaftLeader, descRaftIndex, descRaftTerm, descRaftVoters, descLogHead, descLogLag, descLogErr} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if u, ok := n.store.(usageStore); ok {
		if blocks, bytes, err := u.Usage(ctx); err == nil {
			gauge(descBlocks, float64(blocks))
			gauge(descBytes, float64(bytes))
		}
	}
	gauge(descPeers, float64(len(n.host.Network().Peers())))
	if d := n.DHT(); d != nil {
		gauge(descDHT, float64(d.RoutingTable().Size()))
	}
	if n.replica != nil {
		rs := n.replica.Stats()
		gauge(descCache, float64(rs.CachedBytes))
		gauge(descCacheBlocks, float64(rs.CachedBlocks))
		gauge(descBacklog, float64(rs.RepairBacklog))
		gauge(descMissing, float64(rs.RepairMissing))
		counter(descRepair, float64(rs.RepairChecked), "checked")
		counter(descRepair, float64(rs.RepairShort), "short")
		counter(descRepair, float64(rs.RepairPushed), "pushed")
		counter(descRepair, float64(rs.RepairFixed), "fixed")
		counter(descRepair, float64(rs.RepairFailed), "failed")
		counter(descRefused, float64(rs.ReplicaRefused), "all")
		counter(descRefused, float64(rs.ReplicaFull), "full")
		counter(descProofs, float64(rs.ProofsFailed))
		if ps, err := n.replica.ProviderStats(ctx); err == nil {
			gauge(descAnnounced, float64(ps.Schedule.Keys))
		}
	}
	if n.leases != nil {
		held, leased, collectable, waiting, renewed, _ := n.leaseStats()
		gauge(descLeases, float64(held), "held")
		gauge(descLeases, float64(leased), "leased")
		gauge(descLeases, float64(collectable), "collectable")
		gauge(descLeases, float64(waiting), "unleased")
		gauge(descLeases, float64(renewed), "renewed")
	}
	if keys := n.kst().keys; keys != nil {
		if s, err := keys.Status(ctx); err == nil {
			leader := 0.0
			if s.Leader == s.ID {
				leader = 1
			}
			gauge(descRaftLeader, leader)
			gauge(descRaftIndex, float64(s.LastIndex), "last")
			gauge(descRaftIndex, float64(s.Applied), "applied")
			gauge(descRaftTerm, float64(s.Term))
			gauge(descRaftVoters, float64(len(s.Members)))
		}
	}
	if n.mirrors != nil {
		for _, l := range n.logStatus(ctx) {
			gauge(descLogHead, float64(l.Seq), string(l.User), l.Role)
			if l.Role == RoleMirror {
				gauge(descLogLag, float64(l.Lag), string(l.User))
				failing := 0.0
				if l.Err != "" {
					failing = 1
				}
				gauge(descLogErr, failing, string(l.User))
			}
		}
	}
}
