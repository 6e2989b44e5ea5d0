package replica

import (
	"context"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
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
// bytes wrong asks for it again, saying so (a get again of the block
// protocol: p2p.RemoteStore.Refetch, pack.ReadConfig.Refetch), and the
// node then fetches it with the check, as for any other caller: the lying
// holder's bytes fail it, the holder is dropped for that fetch and scored
// as a liar, and another holder serves the block.
//
// The tests: TestMiddleBypassesLyingHolder (node) and
// TestClientGetUncheckedCachesOnlySound (here).

// uncheckedKey marks the context of a get whose bytes go to a client
// that checks them: fetchFrom does not hash what it fetches.
type uncheckedKey struct{}

func isUnchecked(ctx context.Context) bool { return ctx.Value(uncheckedKey{}) != nil }

// maxChecks bounds the checks of fetched blocks running at once, off the
// clients' paths, for the cache. A block that arrives while all are
// busy is passed on and not cached.
const maxChecks = 4

// GetForClient is Get for a client that checks each block itself against
// its signed entry: a block fetched from another node is passed on
// without a hash check here (see the comment at the top of unchecked.go),
// unless the client asks for it again ([p2p.Recheck]) because the bytes
// it was sent were wrong. Blocks from the local store and the cache are
// as sound as Get's.
func (s *Store) GetForClient(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	if !p2p.Recheck(ctx) {
		ctx = context.WithValue(ctx, uncheckedKey{}, true)
	}
	data, err := s.get(ctx, ref, newFetch())
	if err != nil {
		return nil, spindle.E(spindle.Op("replica.Get"), err)
	}
	return data, nil
}

// keepFetched keeps a block fetched from another node in the cache: at
// once if it was checked on arrival, else after a check off the caller's
// path, if one of maxChecks is free.
func (s *Store) keepFetched(ctx context.Context, ref spindle.Ref, data []byte) {
	if !isUnchecked(ctx) {
		s.cache.add(ref, data)
		return
	}
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
		}
	}()
}
