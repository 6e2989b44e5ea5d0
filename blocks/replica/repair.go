package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
)

// Defaults for the repair settings of Config.
const (
	DefaultRepairInterval = 10 * time.Minute
	DefaultRepairBlocks   = 1000
	DefaultRepairBytes    = 256 << 20
	repairWorkers         = 8 // Blocks checked at once in a round or a drain.
)

// Repair and drain keep every block r-fold as nodes come and go.
//
// Each holder of a block checks it from time to time: it reads its own
// copy, asks the DHT for the block's providers, challenges each to prove
// that it holds the block (a prove request of the block protocol: one
// round trip and a hash of the block on each side, failed by a node that
// lost its copy, holds a damaged one or never kept it, see proof.go; a
// peer that does not answer is taken for dead for the rest of the round,
// so a dead peer costs about one failed dial per round however many
// blocks it held), and when fewer than r nodes prove they hold it,
// pushes its copy to the nodes nearest to the block's key that do not
// hold it, passing over those that failed a challenge.
// Every holder picks the same targets, nearest first, and a push of a
// block already held changes nothing, so holders that find the same
// shortfall at once make one copy, not one each. A copy this node pushed
// in the last half hour counts as held even before its new holder's
// announcement lands, so it is not pushed again.
//
// The work is bounded. A round checks at most Config.RepairBlocks blocks,
// taken from a sweep of the local store in random order, so a node goes
// round all its blocks in (blocks held / RepairBlocks) rounds, and it
// pushes at most Config.RepairBytes (but always the first block it
// finds short, so that a large block is repaired at all). Blocks found
// short and not fixed in a round are the backlog: the next round takes
// them first. Rounds are Config.RepairInterval apart, ±25 % at random so
// that nodes started together do not check together. A lookup that does
// not finish in time says nothing about the block, which is then left for
// a later sweep rather than pushed: a node whose network is slow does not
// take every block for lost and copy it everywhere.
//
// With the defaults, a node holding 10^5 blocks goes round them all in
// about 17 hours (100 rounds of 1000 blocks, 10 minutes apart), well
// within the 48 hours a provider record lives, at about 1.7 provider
// lookups a second, eight at a time, with a read of the block here and a
// challenge to each provider found, and pushes at most 256 MiB every 10
// minutes (about 440 KiB/s) however many blocks a dead node leaves short.
// With blocks of 1 MiB, the challenges cost a node about 1.7 MB/s read and
// hashed for its own rounds and, with r = 3, about twice that answering
// the rounds of the other holders of its blocks: a small part of what a
// disk and SHA-256 (about 1.5 GB/s a core) can do. The next round starts
// an interval after the last one ends, so rounds never pile up on a slow
// network.

// repairProgress is the progress of repair: the sweep under way, the
// backlog and the counts. It is guarded by Store.rmu.
type repairProgress struct {
	sweep   []spindle.Ref       // Blocks of the current sweep not yet checked.
	backlog map[spindle.Ref]int // Found short of copies and not yet fixed: the copies missing.
	recent  map[spindle.Ref]recentPush
	extra   map[spindle.Ref]time.Time // Held beyond the block's home, which holds it, since then.

	rounds    int64
	checked   int64
	short     int64
	pushed    int64
	fixed     int64
	failed    int64
	deferred  int64
	trimmed   int64
	homed     int64 // Copies pushed home to returning nodes.
	homeScans int64
	last      time.Time
	lastErr   error
	draining  bool
}

// RepairResult counts what one repair round did.
type RepairResult struct {
	Checked  int // Blocks whose holders were looked up.
	Short    int // Blocks found with fewer than r live holders.
	Pushed   int // Copies pushed to other nodes.
	Fixed    int // Short blocks brought back to r live holders.
	Failed   int // Short blocks that could not be brought back (kept in the backlog).
	Deferred int // Short blocks left for a later round by the bytes budget.
	Unknown  int // Blocks whose lookup did not finish in time.
	Trimmed  int // Copies deleted here because the block's r home nodes hold it (see home.go).
}

// DrainResult counts what [Store.Drain] did with the blocks held here.
type DrainResult struct {
	Blocks int // Blocks held here.
	Handed int // Blocks copied to other nodes, so that r copies remain without this one.
	Held   int // Blocks already held by r live other nodes.
	Failed int // Blocks left with fewer than r copies on other nodes.
	Pushed int // Copies pushed in all.
}

// startRepair starts the background repair rounds, unless
// Config.RepairInterval is negative.
func (s *Store) startRepair() {
	if s.cfg.RepairInterval < 0 {
		return
	}
	s.wg.Go(func() {
		for {
			// ±25 %: nodes started together spread their rounds out.
			d := s.cfg.RepairInterval * time.Duration(75+rand.IntN(51)) / 100
			t := time.NewTimer(d)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			s.Repair(s.ctx)
		}
	})
}

// Repair runs one repair round: it checks up to Config.RepairBlocks of
// the blocks held here (the backlog first, then the next blocks of the
// sweep) and pushes a copy of each block that has fewer than r live
// holders to the nearest nodes that do not hold it, within
// Config.RepairBytes. Rounds do not overlap: a call waits for one in
// progress. The background loop calls it every Config.RepairInterval; a
// node may call it at any time as well.
func (s *Store) Repair(ctx context.Context) (RepairResult, error) {
	const op spindle.Op = "replica.Repair"
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	if s.draining() {
		return RepairResult{}, spindle.E(op, spindle.Invalid, "the store is draining: it hands its blocks on instead")
	}
	if s.dht.RoutingTable().Size() == 0 {
		// Every block would look short, and there is no one to push to.
		err := spindle.E(spindle.Transient, "no other node of the network is known")
		s.endRound(RepairResult{}, err)
		return RepairResult{}, spindle.E(op, err)
	}
	s.forgetOldPushes()
	s.forgetUnproven()
	refs, err := s.nextRound(ctx)
	if err != nil {
		s.endRound(RepairResult{}, err)
		return RepairResult{}, spindle.E(op, err)
	}
	var (
		mu    sync.Mutex
		res   RepairResult
		spent int64
	)
	// budget reserves n bytes of the round's pushes, always granting the
	// first.
	budget := func(n int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if spent > 0 && spent+n > s.cfg.RepairBytes {
			return false
		}
		spent += n
		return true
	}
	live := newLiveness(s)
	s.each(ctx, refs, func(ref spindle.Ref) {
		out := s.repairOne(ctx, ref, live, budget)
		mu.Lock()
		defer mu.Unlock()
		res.Checked++
		res.Pushed += out.pushed
		switch out.state {
		case stateUnknown:
			res.Unknown++
		case stateShort:
			res.Short++
			res.Failed++
		case stateFixed:
			res.Short++
			res.Fixed++
		case stateDeferred:
			res.Short++
			res.Deferred++
		case stateTrimmed:
			res.Trimmed++
		}
		s.rmu.Lock()
		switch out.state {
		case stateShort, stateDeferred:
			s.repair.backlog[ref] = out.missing
		case stateOK, stateFixed, stateGone, stateTrimmed:
			delete(s.repair.backlog, ref)
		}
		s.rmu.Unlock()
	})
	err = ctx.Err()
	if res.Trimmed > 0 {
		s.recount(s.ctx)
	}
	s.endRound(res, err)
	if err != nil {
		return res, spindle.E(op, spindle.Transient, err)
	}
	return res, nil
}

// nextRound returns the blocks to check in this round: the backlog, then
// blocks of the sweep, up to Config.RepairBlocks. A sweep that is done is
// started again from a listing of the local store, in random order.
func (s *Store) nextRound(ctx context.Context) ([]spindle.Ref, error) {
	s.rmu.Lock()
	empty := len(s.repair.sweep) == 0
	s.rmu.Unlock()
	if empty {
		all, err := s.listLocal(ctx)
		if err != nil {
			return nil, err
		}
		rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		s.rmu.Lock()
		s.repair.sweep = all
		s.rmu.Unlock()
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	budget := s.cfg.RepairBlocks
	var refs []spindle.Ref
	for ref := range s.repair.backlog {
		if len(refs) == budget {
			break
		}
		refs = append(refs, ref)
	}
	inRound := make(map[spindle.Ref]bool, len(refs))
	for _, ref := range refs {
		inRound[ref] = true
	}
	for len(refs) < budget && len(s.repair.sweep) > 0 {
		ref := s.repair.sweep[0]
		s.repair.sweep = s.repair.sweep[1:]
		if !inRound[ref] {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// endRound records a round's result.
func (s *Store) endRound(res RepairResult, err error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	st := &s.repair
	st.rounds++
	st.checked += int64(res.Checked)
	st.short += int64(res.Short)
	st.pushed += int64(res.Pushed)
	st.fixed += int64(res.Fixed)
	st.failed += int64(res.Failed)
	st.deferred += int64(res.Deferred)
	st.trimmed += int64(res.Trimmed)
	st.last = time.Now()
	st.lastErr = err
}

// listLocal returns the refs of every block held in the local store.
func (s *Store) listLocal(ctx context.Context) ([]spindle.Ref, error) {
	l, ok := s.local.(spindle.BlockLister)
	if !ok {
		return nil, spindle.E(spindle.Invalid, "the local block store cannot list its blocks")
	}
	var all []spindle.Ref
	err := l.List(ctx, func(ref spindle.Ref) error {
		all = append(all, ref)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// each calls fn for every ref, repairWorkers at a time, until ctx is done.
func (s *Store) each(ctx context.Context, refs []spindle.Ref, fn func(spindle.Ref)) {
	next := make(chan spindle.Ref)
	var wg sync.WaitGroup
	for range min(repairWorkers, len(refs)) {
		wg.Go(func() {
			for ref := range next {
				fn(ref)
			}
		})
	}
feed:
	for _, ref := range refs {
		select {
		case next <- ref:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
}

// The outcome of checking one block.
type checkState int

const (
	stateOK       checkState = iota // r live holders.
	stateGone                       // No longer held here.
	stateUnknown                    // The lookup did not finish.
	stateShort                      // Short of holders, not fixed.
	stateFixed                      // Was short, now has r.
	stateDeferred                   // Short, left for the bytes budget.
	stateTrimmed                    // Held beyond its home, which holds it: deleted here.
)

type outcome struct {
	state   checkState
	pushed  int
	missing int // Copies short of r after the check (stateShort, stateDeferred).
}

// repairOne checks one block held here and restores its r copies. It
// reads its own copy first: the other holders must prove they hold the
// same bytes.
func (s *Store) repairOne(ctx context.Context, ref spindle.Ref, live *liveness, budget func(int64) bool) outcome {
	k, err := keyOf(ref)
	if err != nil {
		return outcome{state: stateGone}
	}
	data, err := s.localCopy(ctx, ref)
	if err != nil {
		if errors.Is(err, spindle.NotExist) {
			return outcome{state: stateGone}
		}
		return outcome{state: stateUnknown}
	}
	if shard.Is(data) {
		// One copy of each shard is the point of a stripe: a missing
		// shard is rebuilt by RepairStripe, not copied (stripe.go).
		return outcome{state: stateOK}
	}
	ch := blocks.NewChallenge(data)
	holders, complete := s.liveHolders(ctx, ref, k, ch, live, s.cfg.Replicas-1)
	// A copy pushed lately counts even if its holder's announcement has
	// not landed yet, so that it is not pushed again.
	for _, p := range s.recentlyPushed(ref) {
		if !holders[p] && live.proves(ctx, p, ref, ch) {
			holders[p] = true
		}
	}
	have := 1 + len(holders) // With this node's copy.
	if have >= s.cfg.Replicas {
		if s.trim(ctx, ref, k, ch, holders, live) {
			return outcome{state: stateTrimmed}
		}
		return outcome{state: stateOK}
	}
	if !complete {
		return outcome{state: stateUnknown}
	}
	need := s.cfg.Replicas - have
	if !budget(int64(need * len(data))) {
		return outcome{state: stateDeferred, missing: need}
	}
	pushed := s.handOn(ctx, ref, k, data, holders, live, need)
	if pushed < need {
		return outcome{state: stateShort, pushed: pushed, missing: need - pushed}
	}
	return outcome{state: stateFixed, pushed: pushed}
}

// localCopy returns the block held here. If the local copy has gone bad,
// it fetches a good one from another holder and holds that instead, so
// that repair does not lose a copy to a bad disk sector.
func (s *Store) localCopy(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, err := s.local.Get(ctx, ref)
	if !errors.Is(err, spindle.Integrity) {
		return data, err
	}
	// The local store may have discarded the bad copy already, in which
	// case get does not know to put it back.
	if data, err = s.get(ctx, ref, newFetch()); err != nil {
		return nil, err
	}
	if _, err := s.local.Put(ctx, data); err != nil {
		return nil, err
	}
	return data, nil
}

// liveHolders returns the other nodes that provide ref (whose key is k)
// and prove that they hold it, answering ch, stopping at enough of
// them: a provider record outlives the copy it announced by up to 48
// hours, so a holder that lost its copy, or kept a damaged one, must not
// be counted, nor one that announces blocks it does not keep. complete is
// false if the lookup ran out of time before finding enough, in which
// case the holders found may not be all there are.
func (s *Store) liveHolders(ctx context.Context, ref spindle.Ref, k mh.Multihash, ch blocks.Challenge, live *liveness, enough int) (holders map[peer.ID]bool, complete bool) {
	// Ask for every provider (count 0) and stop once enough answer: a
	// bound on the providers asked for would count the provider records
	// of nodes that are offline, which outlive them, against the bound,
	// and a well-held block would look short whenever enough of them
	// came first (every round under churn, so repair pushed copies again
	// and again).
	lctx, cancel := context.WithTimeout(ctx, s.cfg.BaseTimeout)
	defer cancel()
	holders = make(map[peer.ID]bool)
	seen := map[peer.ID]bool{s.h.ID(): true}
	for ai := range s.dht.FindProvidersAsync(lctx, cid.NewCidV1(cid.Raw, k), 0) {
		if seen[ai.ID] {
			continue
		}
		seen[ai.ID] = true
		if len(ai.Addrs) > 0 {
			s.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
		}
		if live.proves(ctx, ai.ID, ref, ch) {
			holders[ai.ID] = true
			if len(holders) >= enough {
				return holders, true
			}
		}
	}
	// The channel closes when the lookup is done or lctx ends.
	return holders, lctx.Err() == nil
}

// handOn pushes data to need of the nodes nearest to key k that are not
// among holders and not known to be down, nearest first, and returns the
// copies made.
func (s *Store) handOn(ctx context.Context, ref spindle.Ref, k mh.Multihash, data []byte, holders map[peer.ID]bool, live *liveness, need int) int {
	near, err := s.closestPeers(ctx, k)
	if err != nil {
		return 0
	}
	var candidates []peer.ID
	for _, p := range near {
		if !holders[p] && !live.down(p) && !s.isUnproven(p) {
			candidates = append(candidates, p)
		}
	}
	done, _ := s.push(ctx, ref, data, blocks.NewChallenge(data), candidates, need)
	if len(done) > 0 {
		s.notePush(ref, done)
	}
	return len(done)
}

// recentTTL is how long a copy this node pushed counts as held without
// an announcement: far longer than the sweeping provider takes to
// announce a new block, far shorter than a sweep of a large store.
const recentTTL = 30 * time.Minute

// A recentPush records the nodes a block was lately pushed to.
type recentPush struct {
	to []peer.ID
	at time.Time
}

// recentlyPushed returns the nodes that ref was pushed to within
// recentTTL.
func (s *Store) recentlyPushed(ref spindle.Ref) []peer.ID {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r, ok := s.repair.recent[ref]
	if !ok || time.Since(r.at) > recentTTL {
		return nil
	}
	return r.to
}

// forgetOldPushes drops the records of pushes older than recentTTL.
func (s *Store) forgetOldPushes() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for ref, r := range s.repair.recent {
		if time.Since(r.at) > recentTTL {
			delete(s.repair.recent, ref)
		}
	}
}

// liveness remembers, for one round or drain, which peers answered a
// challenge and which did not answer at all.
type liveness struct {
	s  *Store
	mu sync.Mutex
	up map[peer.ID]bool
}

func newLiveness(s *Store) *liveness {
	return &liveness{s: s, up: make(map[peer.ID]bool)}
}

// mark records whether p answered, unless that is known already.
func (l *liveness) mark(p peer.ID, up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.up[p]; !ok {
		l.up[p] = up
	}
}

// down reports whether p was asked and did not answer.
func (l *liveness) down(p peer.ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	up, ok := l.up[p]
	return ok && !up
}

// Drain hands every block held here on to other nodes, so that this node
// can leave the network and leave r copies of each behind: for each
// block, it counts the live other nodes that provide it and pushes copies
// to the nearest nodes that do not hold it until r others do. From its
// start, the Store refuses blocks pushed by other nodes (they go to the
// next nearest node instead), and no more repair rounds run: the node is
// expected to close after Drain returns. Drain works on many blocks at
// once and has no bytes budget, since the node is leaving. It returns
// what it did; the error is non-nil only if ctx ended or the local store
// could not be listed.
func (s *Store) Drain(ctx context.Context) (DrainResult, error) {
	const op spindle.Op = "replica.Drain"
	s.rmu.Lock()
	s.repair.draining = true
	s.rmu.Unlock()
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	refs, err := s.listLocal(ctx)
	if err != nil {
		return DrainResult{}, spindle.E(op, err)
	}
	var (
		mu  sync.Mutex
		res DrainResult
	)
	live := newLiveness(s)
	s.each(ctx, refs, func(ref spindle.Ref) {
		handed, pushed, ok := s.drainOne(ctx, ref, live)
		mu.Lock()
		defer mu.Unlock()
		res.Blocks++
		res.Pushed += pushed
		switch {
		case !ok:
			res.Failed++
		case handed:
			res.Handed++
		default:
			res.Held++
		}
	})
	res.Failed += len(refs) - res.Blocks // Not reached before ctx ended.
	res.Blocks = len(refs)
	if err := ctx.Err(); err != nil {
		return res, spindle.E(op, spindle.Transient, err)
	}
	return res, nil
}

// drainOne makes sure r other live nodes hold ref. It reports whether it
// pushed copies, how many, and whether r others now hold it.
func (s *Store) drainOne(ctx context.Context, ref spindle.Ref, live *liveness) (handed bool, pushed int, ok bool) {
	k, err := keyOf(ref)
	if err != nil {
		return false, 0, false
	}
	data, err := s.localCopy(ctx, ref)
	if err != nil {
		return false, 0, false
	}
	// Look for r others, not r−1: this node's copy is leaving. A shard
	// is held once (stripe.go): one other holder takes this one's place.
	want := s.cfg.Replicas
	if shard.Is(data) {
		want = 1
	}
	ch := blocks.NewChallenge(data)
	holders, _ := s.liveHolders(ctx, ref, k, ch, live, want)
	for _, p := range s.recentlyPushed(ref) {
		if !holders[p] && live.proves(ctx, p, ref, ch) {
			holders[p] = true
		}
	}
	need := want - len(holders)
	if need <= 0 {
		return false, 0, true
	}
	pushed = s.handOn(ctx, ref, k, data, holders, live, need)
	return true, pushed, pushed == need
}

// draining reports whether Drain has started.
func (s *Store) draining() bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.repair.draining
}

// repairStats fills the repair fields of st.
func (s *Store) repairStats(st *Stats) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r := &s.repair
	st.RepairBacklog = len(r.backlog)
	for _, n := range r.backlog {
		st.RepairMissing += n
	}
	st.Trimmed = r.trimmed
	st.HomeScans = r.homeScans
	st.HomePushed = r.homed
	st.RepairSweepLeft = len(r.sweep)
	st.RepairRounds = r.rounds
	st.RepairChecked = r.checked
	st.RepairShort = r.short
	st.RepairPushed = r.pushed
	st.RepairFixed = r.fixed
	st.RepairFailed = r.failed
	st.RepairDeferred = r.deferred
	st.LastRepair = r.last
	if r.lastErr != nil {
		st.LastRepairError = fmt.Sprint(r.lastErr)
	}
	st.Draining = r.draining
}
