package replica

import (
	"context"
	"sync"

	"spindle.dev"
	"spindle.dev/blocks"
)

// A node in the middle, serving a client's get of a block it does not
// hold, passes on the bytes a holder sends without hashing them: the
// client hashes every block against the entry its writer signed (and
// ee blocks carry a GCM tag too), so a second hash here would only delay
// the client's block and take CPU from it. What the node keeps is
// checked, though: a block goes into the cache only once a check, off the
// client's path, finds it sound, so that no holder's lie is served to
// others from here (a cache poisoned once would lie to every reader).
//
// A holder that lies is still bypassed: a client that finds a block's
// bytes wrong asks for it again (pack.ReadConfig.Refetch), and a block
// served unchecked lately is fetched with the check the second time, as
// for any other caller: the lying holder's bytes fail it, the holder is
// dropped for that fetch and scored as a liar, and another holder serves
// the block. A client that reads a block twice, for any reason, costs
// the node one hash.
//
// The tests: TestMiddleBypassesLyingHolder (node) and
// TestClientGetUncheckedCachesOnlySound (here).

// uncheckedKey marks the context of a get whose bytes go to a client
// that checks them: fetchFrom does not hash what it fetches.
type uncheckedKey struct{}

func isUnchecked(ctx context.Context) bool { return ctx.Value(uncheckedKey{}) != nil }

// maxUncheckedRefs bounds the blocks a Store remembers serving without a
// check (a ring: the oldest is forgotten first). A client asks again
// within moments of the first answer, while its read-ahead of a few
// dozen blocks at most is in flight.
const maxUncheckedRefs = 4096

// maxChecks bounds the checks of fetched blocks running at once, off the
// clients' paths, for the cache. A block that arrives while all are
// busy is passed on and not cached.
const maxChecks = 4

// uncheckedRefs is the set of blocks served unchecked and not checked
// since, bounded by maxUncheckedRefs. The zero value is ready to use.
type uncheckedRefs struct {
	mu   sync.Mutex
	set  map[spindle.Ref]struct{}
	ring []spindle.Ref // Of at most maxUncheckedRefs; next is the oldest once full.
	next int
}

// add records that ref was served unchecked.
func (u *uncheckedRefs) add(ref spindle.Ref) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.set == nil {
		u.set = make(map[spindle.Ref]struct{})
	}
	if _, ok := u.set[ref]; ok {
		return
	}
	if len(u.ring) < maxUncheckedRefs {
		u.ring = append(u.ring, ref)
	} else {
		delete(u.set, u.ring[u.next])
		u.ring[u.next] = ref
		u.next = (u.next + 1) % maxUncheckedRefs
	}
	u.set[ref] = struct{}{}
}

// has reports whether ref was served unchecked and not checked since.
func (u *uncheckedRefs) has(ref spindle.Ref) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.set[ref]
	return ok
}

// checked forgets ref, which has been found sound. (It stays in the ring
// until its slot is reused; has no longer reports it.)
func (u *uncheckedRefs) checked(ref spindle.Ref) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.set, ref)
}

// GetForClient is Get for a client that checks each block itself against
// its signed entry: a block fetched from another node is passed on
// without a hash check here (see the comment at the top of unchecked.go),
// unless it was served so lately, when the client is taken to be asking
// again because the bytes were wrong. Blocks from the local store and the
// cache are as sound as Get's.
func (s *Store) GetForClient(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "replica.Get"
	if s.unchecked.has(ref) {
		data, err := s.get(ctx, ref, newFetch())
		if err != nil {
			return nil, spindle.E(op, err)
		}
		s.unchecked.checked(ref)
		return data, nil
	}
	data, err := s.get(context.WithValue(ctx, uncheckedKey{}, true), ref, newFetch())
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return data, nil
}

// keepFetched keeps a block fetched from another node in the cache: at
// once if it was checked on arrival, else after a check off the caller's
// path, if one of maxChecks is free, noting it as served unchecked.
func (s *Store) keepFetched(ctx context.Context, ref spindle.Ref, data []byte) {
	if !isUnchecked(ctx) {
		s.cache.add(ref, data)
		return
	}
	s.unchecked.add(ref)
	if s.cfg.CacheBytes < 0 {
		return
	}
	select {
	case s.checks <- struct{}{}:
	default:
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.checks
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	own := append([]byte(nil), data...) // The caller's bytes go on to the client.
	go func() {
		defer s.wg.Done()
		defer func() { <-s.checks }()
		if blocks.Check(ref, own) == nil {
			s.cache.keep(ref, own)
			s.unchecked.checked(ref)
		}
	}()
}
