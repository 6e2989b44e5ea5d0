package host

import (
	"testing"

	"spindle.dev/dirlog"
)

// FuzzFixFrame feeds arbitrary frames to the repair's byte fixer, which
// must never panic, and whose fix, when it makes one, must give a record
// that follows the given head.
func FuzzFixFrame(f *testing.F) {
	f.Add(dirlog.AppendFrame(nil, []byte("record")), int64(0), int64(0))
	f.Add(dirlog.AppendFrame(dirlog.AppendFrame(nil, []byte("one")), []byte("two")), int64(11), int64(1))
	f.Fuzz(func(t *testing.T, data []byte, off, seq int64) {
		if len(data) > 1<<16 {
			return
		}
		at, b, ok := fixFrame(data, off, seq, dirlog.Hash{})
		if !ok {
			return
		}
		fixed := append([]byte(nil), data...)
		copy(fixed[at:], b)
		if !follows(fixed, off, seq, dirlog.Hash{}) {
			t.Fatalf("fix at %d does not give a record that follows", at)
		}
	})
}
