package replica

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ScoreOf is how well p has served this store lately, for tests.
func (s *Store) ScoreOf(p peer.ID) float64 { return s.seen.score(p, time.Now()) }
