package disk

// For the external tests.
const TrailerLen = trailerLen

var AppendTrailer = appendTrailer

// SmallMax is the size from which blocks get a file of their own.
const SmallMax = smallMax

// Buffered makes s write every block through the page cache, as it does on
// file systems that refuse O_DIRECT.
func Buffered(s *Store) { s.noDirect.Store(true) }

// Direct reports whether s still writes large blocks with direct I/O: it
// stops for good when the file system refuses (or a write is misaligned,
// which Linux and spindle.MemFS report alike).
func Direct(s *Store) bool { return !s.noDirect.Load() }
