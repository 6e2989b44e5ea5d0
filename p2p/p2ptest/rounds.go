package p2ptest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// A RoundCounter counts the round trips a host makes on the streams it
// opens: a round is the requests sent before any answer of the round
// came back; a request sent after an answer of the current round arrived
// starts a new one (an answer of an earlier round, late, does not). A
// round trip costs its time over a far link whatever the requests in it,
// so the count, times the link's round-trip time, is what the link adds.
//
// It sees the bytes written to and read from each stream (see
// CountingHost): a write is a request, a read an answer. (A stream opened
// with a choice of protocols that the peer's identify has not told about
// would negotiate in a round of its own, unseen here.)
//
// On loopback an answer may come back before the client, busy with the
// answer before, sends a request that a far link would see go out in the
// same round; so the counter holds each answer back until RTT after the
// last request on its stream, as a link of that round-trip time would.
type RoundCounter struct {
	// RTT is the round-trip time the counter makes; zero holds nothing
	// back.
	RTT time.Duration
	// Describe, if set, names what a write of p to a stream of proto
	// sends, for the log of each round; "" leaves it out.
	Describe func(proto protocol.ID, p []byte) string

	mu       sync.Mutex
	rounds   int
	answered bool     // An answer of the current round came back.
	log      []string // What each round sent.
}

// NewRoundCounter returns a counter that makes round trips of rtt.
func NewRoundCounter(rtt time.Duration) *RoundCounter {
	return &RoundCounter{RTT: rtt, answered: true}
}

// Reset starts counting afresh.
func (c *RoundCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds, c.answered, c.log = 0, true, nil
}

// Count returns the rounds so far and what each sent.
func (c *RoundCounter) Count() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds, strings.Join(c.log, "; ")
}

// sent counts a write of p to a stream of proto and returns its round.
func (c *RoundCounter) sent(proto protocol.ID, p []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		c.rounds++
		c.answered = false
		c.log = append(c.log, fmt.Sprintf("round %d:", c.rounds))
	}
	if c.Describe != nil {
		if what := c.Describe(proto, p); what != "" {
			c.log[len(c.log)-1] += " " + what
		}
	}
	return c.rounds
}

// received counts an answer to a request of round.
func (c *RoundCounter) received(round int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if round == c.rounds {
		c.answered = true
	}
}

// A CountingHost is a host whose streams, those Count admits, report to
// a RoundCounter.
type CountingHost struct {
	host.Host
	C *RoundCounter
	// Count, if set, says which streams are counted: those to peer p
	// for which it returns true. If nil, all are.
	Count func(p peer.ID) bool
}

// NewStream implements host.Host.
func (h *CountingHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil || h.Count != nil && !h.Count(p) {
		return s, err
	}
	return &countingStream{Stream: s, c: h.C}, nil
}

type countingStream struct {
	network.Stream
	c         *RoundCounter
	mu        sync.Mutex
	lastWrite time.Time
	round     int // The round of the last write.
}

func (s *countingStream) Write(p []byte) (int, error) {
	if len(p) > 0 {
		round := s.c.sent(s.Protocol(), p)
		s.mu.Lock()
		s.lastWrite, s.round = time.Now(), round
		s.mu.Unlock()
	}
	return s.Stream.Write(p)
}

func (s *countingStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if n > 0 {
		s.mu.Lock()
		due, round := s.lastWrite.Add(s.c.RTT), s.round
		s.mu.Unlock()
		time.Sleep(time.Until(due))
		s.c.received(round)
	}
	return n, err
}
