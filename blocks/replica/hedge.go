package replica

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/p2p"
)

// A fetch races the holders of a block. Anyone who can make a peer ID
// can announce itself as a provider of a block whose address it can
// compute (the blocks of a public file), and then send nothing, or send
// bytes very slowly; the hash check catches wrong bytes, not slow ones.
// So a fetch
//
//   - asks the first provider the DHT names (the best of those found
//     within providerGrace), and while the lookup goes on, asks another
//     each time a hedge delay passes without an answer while no peer it
//     is waiting for sends at even a hedgeSlack-th of a fair rate (so
//     that a busy holder's pauses do not double its load), up to
//     maxRace at once. The delay is a multiple of the time a block has
//     taken lately (its bytes over the rate its peer sent at, blocks
//     for others included, so that a block queued behind others at a
//     busy peer does not count as slow), and at least hedgeFloor; a
//     fair rate is a behindFactor-th of the rate peers have sent at
//     lately (Config.MinRate before any has);
//   - cuts an attempt that falls far behind: one that has run for
//     cutMul times the usual block time (within cutFloor and cutMax)
//     while its peer did not send at a fair rate, when another provider
//     is left to ask in its place (the last hope is given the whole
//     timeout of Config.MinRate); and when maxRace attempts run and a
//     peer that served well waits, one whose peer has sent next to
//     nothing for a hedge delay (within hedgeFloor and hedgeMax);
//   - remembers, per peer, how its fetches went (a score that decays
//     with a half-life of scoreHalfLife, for at most maxScores peers),
//     and asks first the peers whose last block hashed right, then
//     peers not yet seen, and last those that were slow, failed or lied
//     since; among equals, the least busy.
//
// The first answer that hashes right wins and the other attempts are
// cancelled. A fetch holds at most maxRace attempts and one lookup at a
// time, and waits for all of them before it returns.
const (
	hedgeFloor    = 40 * time.Millisecond
	hedgeMax      = 250 * time.Millisecond
	hedgeMul      = 2
	cutFloor      = 250 * time.Millisecond
	cutMax        = time.Second
	cutMul        = 4
	behindFactor  = 8
	hedgeSlack    = 8
	maxRace       = 4
	maxProviders  = 64
	maxScores     = 4096
	scoreHalfLife = 10 * time.Minute
)

// providerGrace is how long a fetch waits for more providers after the
// first, unless one of them has served well, so that it can choose
// among them, and the blocks of a file are spread over all their
// holders rather than all fetched from whichever answered first.
const providerGrace = 20 * time.Millisecond

// Score changes for the outcomes of an attempt.
const (
	scoreServed = 1   // The block arrived and hashed right.
	scoreFailed = -1  // The peer answered with an error, or could not be reached.
	scoreBehind = -2  // The attempt was cut for falling behind.
	scoreLied   = -8  // The peer sent bytes other than the block.
	scoreMax    = 8   // Scores stay within [scoreMin, scoreMax].
	scoreMin    = -16 //
)

// seen is what a Store has seen of fetches: the time blocks take and the
// rate they arrive at, and a score per peer. Its fields are guarded by
// mu.
type seen struct {
	mu     sync.Mutex
	srtt   time.Duration // Smoothed time of a block's bytes at its peer's rate (zero: none seen).
	rate   float64       // Smoothed bytes per second a peer sends while fetches from it are in progress.
	peers  map[peer.ID]peerScore
	hedged int64 // Attempts made while others were running.
	cut    int64 // Attempts cut for falling behind.
	stolen int64 // Attempts made of an idle peer for a block queued at another.
}

// stats adds the figures of fetches to st.
func (sn *seen) stats(st *Stats) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	st.FetchHedged, st.FetchCut, st.FetchStolen, st.FetchPeers = sn.hedged, sn.cut, sn.stolen, len(sn.peers)
}

// count adds to the figures of fetches.
func (sn *seen) count(hedged, cut, stolen int64) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.hedged += hedged
	sn.cut += cut
	sn.stolen += stolen
}

type peerScore struct {
	v      float64
	at     time.Time // When v was last set.
	served int64     // Blocks the peer has served (forgotten with the score).
	rate   float64   // Smoothed bytes per second the peer sends while fetches from it are in progress (zero: none seen).
}

// decayed returns the score at time now.
func (ps peerScore) decayed(now time.Time) float64 {
	return ps.v * math.Exp2(-float64(now.Sub(ps.at))/float64(scoreHalfLife))
}

// observe records a block of n bytes that arrived from peer p in d,
// while p sent sent bytes in all (this block's and others').
func (sn *seen) observe(p peer.ID, d time.Duration, n int, sent int64) {
	d = max(d, time.Microsecond)
	rate := float64(max(sent, int64(n))) / d.Seconds() // The peer's rate.
	d = max(time.Duration(float64(n)/rate*float64(time.Second)), time.Microsecond)
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if ps, ok := sn.peers[p]; ok {
		if ps.rate == 0 {
			ps.rate = rate
		} else {
			ps.rate = (3*ps.rate + rate) / 4
		}
		sn.peers[p] = ps
	} else {
		sn.remember(p, peerScore{at: time.Now(), rate: rate})
	}
	if sn.srtt == 0 {
		sn.srtt, sn.rate = d, rate
		return
	}
	sn.srtt = (7*sn.srtt + d) / 8
	sn.rate = (7*sn.rate + rate) / 8
}

// hedgeDelay returns how long an attempt runs before another holder is
// asked as well.
func (sn *seen) hedgeDelay() time.Duration {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return min(max(hedgeFloor, hedgeMul*sn.srtt), hedgeMax)
}

// cutAfter returns how long an attempt runs before it may be cut, and
// the fair rate in bytes per second, below which its peer is behind.
func (sn *seen) cutAfter(minRate int64) (time.Duration, float64) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	rate := float64(minRate)
	if sn.rate > 0 {
		rate = sn.rate / behindFactor
	}
	return min(max(cutFloor, cutMul*sn.srtt), cutMax), rate
}

// score returns peer p's score now.
func (sn *seen) score(p peer.ID, now time.Time) float64 {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.peers[p].decayed(now)
}

// add adds delta to peer p's score, keeping at most maxScores peers. A
// positive delta (a block served well) first raises a negative score to
// zero, so that the peer that served last is among the first asked next.
func (sn *seen) add(p peer.ID, delta float64) {
	now := time.Now()
	sn.mu.Lock()
	defer sn.mu.Unlock()
	ps, ok := sn.peers[p]
	if !ok {
		sn.remember(p, ps)
	}
	v := ps.decayed(now)
	if delta > 0 {
		v = max(v, 0) // A block that hashed right outweighs the past.
	}
	ps.v, ps.at = min(max(v+delta, scoreMin), scoreMax), now
	if delta == scoreServed {
		ps.served++
	}
	sn.peers[p] = ps
}

// remember adds peer p, not yet known, with ps, forgetting another if
// maxScores are known. sn.mu is held.
func (sn *seen) remember(p peer.ID, ps peerScore) {
	now := time.Now()
	if len(sn.peers) >= maxScores {
		// Forget the weakest of a few peers (map order is random), so
		// that strong scores, good or bad, are kept longest.
		var victim peer.ID
		weakest, n := math.Inf(1), 0
		for q, qs := range sn.peers {
			if v := math.Abs(qs.decayed(now)); v < weakest {
				victim, weakest = q, v
			}
			if n++; n == 8 {
				break
			}
		}
		delete(sn.peers, victim)
	}
	sn.peers[p] = ps
}

// peerRate returns the rate peer p has sent at lately, or, if it has not
// been seen, the rate of peers in general; zero if none has been seen.
func (sn *seen) peerRate(p peer.ID) float64 {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if r := sn.peers[p].rate; r > 0 {
		return r
	}
	return sn.rate
}

// Served returns, for each peer remembered (see maxScores), the blocks
// it has served to fetches of this Store.
func (s *Store) Served() map[peer.ID]int64 {
	s.seen.mu.Lock()
	defer s.seen.mu.Unlock()
	out := make(map[peer.ID]int64)
	for p, ps := range s.seen.peers {
		if ps.served > 0 {
			out[p] = ps.served
		}
	}
	return out
}

// tier places a score in one of three classes: 0 for peers that served
// well, 1 for unknown ones, 2 for those that did not.
func tier(v float64) int {
	switch {
	case v >= scoreServed/2.0:
		return 0
	case v > scoreFailed/2.0:
		return 1
	}
	return 2
}

// load returns the fetches from peer p in progress, and those abandoned
// whose blocks p may still be sending ahead of the next.
func (s *Store) load(p peer.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.inflight[p]
	if r := s.remotes[p]; r != nil {
		n += r.Owed()
	}
	return n
}

// rank orders peers best first: by tier, then by when a block asked of
// each now would arrive (the fetches in progress from it, and this one,
// at the rate it has sent at lately: so a peer twice as fast is given
// twice as many blocks in flight), then by score; ties in random order.
// A peer not seen yet is taken to send at the rate of peers in general.
func (s *Store) rank(peers []peer.ID) {
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	now := time.Now()
	score := make(map[peer.ID]float64, len(peers))
	finish := make(map[peer.ID]float64, len(peers))
	for _, p := range peers {
		score[p] = s.seen.score(p, now)
		finish[p] = s.seen.peerRate(p)
	}
	for _, p := range peers {
		load := float64(s.load(p) + 1)
		if rate := finish[p]; rate > 0 {
			finish[p] = load / rate
		} else {
			finish[p] = load // No rate known: by load alone.
		}
	}
	sort.SliceStable(peers, func(i, j int) bool {
		a, b := peers[i], peers[j]
		if ta, tb := tier(score[a]), tier(score[b]); ta != tb {
			return ta < tb
		}
		if finish[a] != finish[b] {
			return finish[a] < finish[b]
		}
		return score[a] > score[b]
	})
}

// An attempt is the fetch of a block from one peer.
type attempt struct {
	r      *p2p.RemoteStore
	start  time.Time
	rtt    time.Duration // The peer's round trip time as last measured (zero: unknown).
	recv0  int64         // r.Received() at the start.
	queued int           // Fetches in progress from the peer at the start, this one included.
	cancel context.CancelFunc
	cut    bool
}

type answer struct {
	a    *attempt
	data []byte
	sent int64 // Bytes the peer sent during the attempt.
	err  error
}

// behind reports whether a has fallen far behind by now: it has run
// long enough to be cut, and its peer sends at less than a fair rate.
func (s *Store) behind(a *attempt, now time.Time) bool {
	after, _ := s.seen.cutAfter(s.cfg.MinRate)
	return now.Sub(a.start) >= after && !s.sending(a, now, 1)
}

// sending reports whether a's peer has sent at a fair rate, divided by
// slack, since a started, less two round trips to the peer: the time for
// the request to arrive and the first bytes to come back, and as much
// again for TCP to open its window, during which no peer far away can
// send anything. (A peer that is slow only to answer pings gains at most
// that time.)
func (s *Store) sending(a *attempt, now time.Time, slack float64) bool {
	_, rate := s.seen.cutAfter(s.cfg.MinRate)
	elapsed := max(0, now.Sub(a.start)-min(2*a.rtt, maxRTTGrace))
	return float64(a.r.Received()-a.recv0) >= rate/slack*elapsed.Seconds()
}

// maxRTTGrace bounds the round trips an attempt is given before its peer
// must send (see sending).
const maxRTTGrace = time.Second

// fetch gets the block from its providers, racing them as described
// above. If none has it, it asks the nodes nearest to its key, where Put
// places copies, in case their announcements have not landed.
func (s *Store) fetch(ctx context.Context, ref spindle.Ref, k mh.Multihash, f *fetch) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // Before the Wait: ends the lookup and the attempts.
	found := make(chan peer.ID)
	wg.Go(func() { s.lookup(ctx, k, found) })
	done := make(chan answer)

	var (
		known    = map[peer.ID]bool{s.h.ID(): true} // Peers found, asked or not.
		pool     []peer.ID                          // Candidates not yet asked.
		live     []*attempt                         // Attempts running and not cut.
		pending  int                                // Attempts whose answer has not arrived.
		problems []error
		started  bool // An attempt has been made.
		nearDone bool // The nearest nodes have been added to the pool.
		hedgeAt  time.Time
		asked    int
	)
	graceEnd := time.Time{}
	add := func(p peer.ID) {
		if known[p] || f.isBad(p) {
			return
		}
		known[p] = true
		pool = append(pool, p)
		if graceEnd.IsZero() {
			graceEnd = time.Now().Add(providerGrace)
		}
	}
	launch := func(now time.Time, i int) {
		p := pool[i]
		pool = append(pool[:i], pool[i+1:]...)
		r, err := s.remote(p)
		if err != nil {
			problems = append(problems, err)
			return
		}
		actx, acancel := context.WithCancel(ctx)
		a := &attempt{r: r, start: now, rtt: s.h.Peerstore().LatencyEWMA(p), recv0: r.Received(), queued: s.begin(p), cancel: acancel}
		if len(live) > 0 {
			s.seen.count(1, 0, 0)
		}
		live = append(live, a)
		pending++
		asked++
		started = true
		hedgeAt = now.Add(s.seen.hedgeDelay())
		wg.Go(func() {
			data, err := s.fetchFrom(actx, r, ref, a.queued)
			sent := r.Received() - a.recv0
			acancel()
			select {
			case done <- answer{a, data, sent, err}:
			case <-ctx.Done():
				if err == nil {
					p2p.RecycleBlock(data)
				}
			}
		})
	}
	drop := func(a *attempt) {
		for i, b := range live {
			if b == a {
				live = append(live[:i], live[i+1:]...)
				return
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lookupDone := false
	waitSlot := false // The first attempt waits for a slot (see roomAt).
	for {
		now := time.Now()
		// Cut the attempts that fall far behind, if there is someone
		// else to ask; and when every slot is taken, one whose peer
		// sends next to nothing if a peer that served well waits.
		preempt := len(live) == maxRace && s.anyServed(pool, now)
		for i := 0; i < len(live) && len(pool) > 0; {
			a := live[i]
			if !s.behind(a, now) && !(preempt && s.silent(a, now)) {
				i++
				continue
			}
			preempt = false
			a.cut = true
			a.cancel()
			drop(a)
			s.seen.add(a.r.Peer(), scoreBehind)
			s.seen.count(0, 1, 0)
			problems = append(problems, spindle.E(spindle.Transient, fmt.Sprintf("peer %s sent %d bytes in %v: cut for falling behind", a.r.Peer(), a.r.Received()-a.recv0, now.Sub(a.start).Round(time.Millisecond))))
		}
		// Ask another provider: the first once the grace is over (or
		// at once if one served well), then whenever none is being
		// asked, and when the hedge delay has passed while no peer
		// asked sends at a fair rate; and steal the block for a peer
		// that has nothing to do, if it would bring it well before
		// those asked. The first is asked only when it has room in its
		// window; until one of the best has, the fetch waits for a slot.
		waitSlot = false
		for len(pool) > 0 && len(live) < maxRace {
			first := !started && (!now.Before(graceEnd) || len(pool) >= s.cfg.Replicas || s.anyServed(pool, now))
			hedge := started && (len(live) == 0 || !now.Before(hedgeAt) && !s.anySending(live, now))
			steal := started && !hedge && s.stealable(pool, live, now)
			if !first && !hedge && !steal {
				break
			}
			s.rank(pool)
			i := 0
			if first {
				if i = s.roomAt(pool, now); i < 0 {
					waitSlot = true
					break
				}
			}
			if steal {
				s.seen.count(0, 0, 1)
			}
			launch(now, i)
		}
		if len(pool) == 0 && lookupDone && (len(live) == 0 || !nearDone && s.allBehind(live, now)) {
			if !nearDone && ctx.Err() == nil {
				// No provider is left, or none but those falling
				// behind: ask the nodes nearest to the key too.
				nearDone = true
				near, err := s.closestPeers(ctx, k)
				if err != nil {
					problems = append(problems, err)
				}
				for _, p := range near {
					add(p)
				}
				graceEnd = now // No grace: these are all there are.
				continue
			}
			if len(live) == 0 && pending == 0 {
				break
			}
		}
		// Sleep until the next hedge, or the end of the grace, or the
		// next check of the attempts running.
		wake := time.Hour
		if len(pool) == 0 && lookupDone && !nearDone && len(live) > 0 {
			wake = s.seen.hedgeDelay() // To see whether they fall behind.
		}
		if len(pool) > 0 {
			switch {
			case !started:
				wake = time.Until(graceEnd)
			case len(live) < maxRace && now.Before(hedgeAt):
				wake = hedgeAt.Sub(now)
			default:
				wake = s.seen.hedgeDelay()
			}
			wake = max(wake, time.Millisecond)
		}
		if waitSlot {
			wake = max(wake, s.seen.hedgeDelay()) // Woken when a slot frees.
		}
		timer.Reset(wake)
		foundCh := found
		if lookupDone {
			foundCh = nil
		}
		var freed <-chan struct{}
		if waitSlot {
			freed = s.freedChan()
		}
		select {
		case <-freed:
		case p, ok := <-foundCh:
			if !ok {
				lookupDone = true
				if !started {
					graceEnd = time.Now() // Every provider is known.
				}
				continue
			}
			add(p)
		case o := <-done:
			pending--
			drop(o.a)
			p := o.a.r.Peer()
			if o.err == nil {
				s.seen.observe(p, time.Since(o.a.start), len(o.data), o.sent)
				if !isUnchecked(ctx) {
					// Bytes passed on unchecked earn nothing: a
					// holder caught lying climbs back only by
					// blocks that hashed right.
					s.seen.add(p, scoreServed)
				}
				return o.data, nil
			}
			switch {
			case errors.Is(o.err, spindle.Integrity):
				f.drop(p)
				s.seen.add(p, scoreLied)
			case o.a.cut:
				continue // Scored, and its problem noted, when cut.
			case ctx.Err() == nil:
				s.seen.add(p, scoreFailed)
			}
			problems = append(problems, o.err)
		case <-timer.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return nil, spindle.E(spindle.Transient, ctx.Err())
		}
	}
	if len(problems) == 0 {
		return nil, spindle.E(spindle.NotExist, fmt.Sprintf("block %s: no node provides it", ref))
	}
	kind := spindle.NotExist
	for _, p := range problems {
		if !errors.Is(p, spindle.NotExist) && !errors.Is(p, spindle.Integrity) {
			kind = spindle.IO // Some node may hold it but could not be reached.
		}
	}
	return nil, spindle.E(kind, fmt.Sprintf("block %s: %d nodes tried", ref, asked), errors.Join(problems...))
}

// Windows: the fetches a get keeps in flight from one peer at most, so
// that the blocks of a file are not all queued at once, before the rates
// of their providers are known, at peers that turn out slow. A peer whose
// rate is known is given windowTime's worth of blocks at that rate (at
// least minWindow); one not seen yet, initialWindow.
const (
	windowTime    = 2 * time.Second
	minWindow     = 2
	initialWindow = 4
)

// window returns the fetches to have in flight from peer p at most.
func (s *Store) window(p peer.ID) int {
	s.seen.mu.Lock()
	rate := s.seen.peers[p].rate
	s.seen.mu.Unlock()
	if rate <= 0 {
		return initialWindow
	}
	return max(minWindow, int(math.Ceil(rate*windowTime.Seconds()/spindle.MaxBlockSize)))
}

// roomAt returns the index in pool (ranked) of the first peer of the best
// tier that has room in its window, or -1 if none has: the fetch then
// waits for a slot rather than ask a peer of a lower tier. The fetches
// counted are those in progress, which all end (abandoned ones the peer
// may still be sending are not: a peer that never answers them would
// never have room).
func (s *Store) roomAt(pool []peer.ID, now time.Time) int {
	best := tier(s.seen.score(pool[0], now))
	for i, p := range pool {
		if tier(s.seen.score(p, now)) != best {
			break
		}
		s.mu.Lock()
		n := s.inflight[p]
		s.mu.Unlock()
		if n < s.window(p) {
			return i
		}
	}
	return -1
}

// freedChan returns a channel closed when a fetch in progress next ends.
func (s *Store) freedChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}

// stealFactor is how much sooner an idle peer must be expected to bring
// a block than the attempts in progress for it to be asked as well; and
// stealIdle how long it must have been idle: in the middle of a get, a
// peer is idle only for the moment between a block and the next that a
// waiting fetch asks of it, and a block stolen then would be sent twice.
const (
	stealFactor = 2
	stealIdle   = 100 * time.Millisecond
)

// stealable reports whether the best of pool (which it ranks) has not
// failed lately, has had no fetch in progress for stealIdle (or never
// had one), and would bring a block
// stealFactor times sooner than any of attempts is expected to finish
// (a peer not seen yet is taken to send at the rate of peers in general).
// At the end of a many-block get, a fast provider that has finished its
// share takes over the blocks still queued at a slower one; and a
// provider that the lookups found too late to be asked first is tried
// once it is idle, rather than never. The first answer wins.
func (s *Store) stealable(pool []peer.ID, attempts []*attempt, now time.Time) bool {
	if len(attempts) == 0 {
		return false
	}
	s.rank(pool)
	p := pool[0]
	if tier(s.seen.score(p, now)) == 2 {
		return false
	}
	s.mu.Lock()
	since, paused := s.idleSince[p]
	s.mu.Unlock()
	idle := s.load(p) == 0 && (!paused || now.Sub(since) >= stealIdle)
	rate := s.seen.peerRate(p)
	if !idle || rate <= 0 {
		return false
	}
	mine := float64(spindle.MaxBlockSize) / rate
	for _, a := range attempts {
		r := s.seen.peerRate(a.r.Peer())
		if r <= 0 {
			return false
		}
		left := float64(a.queued)*float64(spindle.MaxBlockSize)/r - now.Sub(a.start).Seconds()
		if left < stealFactor*mine {
			return false
		}
	}
	return true
}

// silent reports whether a has run for a hedge delay while its peer sent
// next to nothing.
func (s *Store) silent(a *attempt, now time.Time) bool {
	return now.Sub(a.start) >= s.seen.hedgeDelay() && !s.sending(a, now, hedgeSlack)
}

// allBehind reports whether every one of attempts has fallen far behind.
func (s *Store) allBehind(attempts []*attempt, now time.Time) bool {
	for _, a := range attempts {
		if !s.behind(a, now) {
			return false
		}
	}
	return true
}

// anySending reports whether the peer of one of attempts sends at a fair
// rate.
func (s *Store) anySending(attempts []*attempt, now time.Time) bool {
	for _, a := range attempts {
		if s.sending(a, now, hedgeSlack) {
			return true
		}
	}
	return false
}

// anyServed reports whether one of peers has served blocks well lately.
func (s *Store) anyServed(peers []peer.ID, now time.Time) bool {
	for _, p := range peers {
		if tier(s.seen.score(p, now)) == 0 {
			return true
		}
	}
	return false
}

// lookup sends the providers of key k that the DHT finds, up to
// maxProviders of them, on out, and closes out when the lookup ends
// (Config.BaseTimeout at most) or ctx is done.
func (s *Store) lookup(ctx context.Context, k mh.Multihash, out chan<- peer.ID) {
	defer close(out)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BaseTimeout)
	defer cancel()
	for ai := range s.dht.FindProvidersAsync(ctx, cid.NewCidV1(cid.Raw, k), maxProviders) {
		if ai.ID == s.h.ID() || !s.admitted(ai.ID) {
			continue
		}
		if len(ai.Addrs) > 0 {
			s.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
		}
		select {
		case out <- ai.ID:
		case <-ctx.Done():
			return
		}
	}
}
