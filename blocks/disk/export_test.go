package disk

// For the external tests.
const TrailerLen = trailerLen

var AppendTrailer = appendTrailer

// SmallMax is the size from which blocks get a file of their own.
const SmallMax = smallMax

// Buffered makes s write every block through the page cache, as it does on
// file systems that refuse O_DIRECT.
func Buffered(s *Store) { s.noDirect.Store(true) }
