package dirlog

import (
	"testing"
)

// FuzzFixFrame feeds arbitrary frames to the repair's byte fixer, which
// must never panic, and whose fix, when it makes one, must give a record
// that follows the given head.
func FuzzFixFrame(f *testing.F) {
	f.Add(appendFrame(nil, []byte("record")), int64(0), int64(0))
	f.Add(appendFrame(appendFrame(nil, []byte("one")), []byte("two")), int64(11), int64(1))
	f.Fuzz(func(t *testing.T, data []byte, off, seq int64) {
		if len(data) > 1<<16 {
			return
		}
		at, b, ok := fixFrame(data, off, seq, Hash{})
		if !ok {
			return
		}
		fixed := append([]byte(nil), data...)
		copy(fixed[at:], b)
		if !follows(fixed, off, seq, Hash{}) {
			t.Fatalf("fix at %d does not give a record that follows", at)
		}
	})
}
