package dirlog

import (
	"bytes"
	"testing"

	"spindle.dev"
)

// FuzzCheckpointChunks checks that a checkpoint the decoder takes is
// stored as chunks that make the same checkpoint again.
func FuzzCheckpointChunks(f *testing.F) {
	f.Add((&Checkpoint{User: ann}).Marshal())
	f.Add([]byte(checkpointMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := UnmarshalCheckpoint(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		cp.Fold()
		var c chunker
		for i, rec := range cp.Chunks() {
			if ok, err := c.add(rec, i == 0); !ok || err != nil {
				t.Fatalf("chunk %d: %v %v", i, ok, err)
			}
		}
		if got, err := c.Checkpoint(); err != nil || !bytes.Equal(got.Marshal(), data) {
			t.Fatalf("checkpoint from its chunks: %v", err)
		}
	})
}
