package p2p

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"spindle.dev"
)

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{tagData, 0, 0, 0, 3, 'a', 'b', 'c'}, 10)
	f.Add([]byte{tagError, 0, 0, 0, 0}, 10)
	f.Add([]byte{tagData, 0xff, 0xff, 0xff, 0xff}, 10)
	f.Add([]byte{9, 0, 0, 0, 1, 0}, 10)
	f.Add([]byte{tagData, 0, 0}, 10)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = max & 0xffff
		r := bytes.NewReader(data)
		for {
			before := r.Len()
			tag, buf, err := readFrame(r, max)
			if err == io.EOF {
				return
			}
			if err != nil {
				// Only the header of a rejected frame is read, so a
				// hostile length never makes the reader allocate.
				if errors.Is(err, spindle.Invalid) && before-r.Len() != headerLen {
					t.Fatalf("rejected frame: read %d bytes, want the %d of its header", before-r.Len(), headerLen)
				}
				return
			}
			if len(buf) > max {
				t.Fatalf("frame of %d bytes accepted with limit %d", len(buf), max)
			}
			if tag != tagData && tag != tagError {
				t.Fatalf("frame with tag %d accepted", tag)
			}
		}
	})
}

func TestReadFrame(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		kind spindle.Kind
		eof  bool
	}{
		{in: nil, eof: true},
		{in: []byte{tagData, 0, 0, 0, 11}, kind: spindle.Invalid},
		{in: []byte{3, 0, 0, 0, 1, 'x'}, kind: spindle.Invalid},
		{in: []byte{tagData, 0, 0}, kind: spindle.Other},
		{in: []byte{tagData, 0, 0, 0, 5, 'x'}, kind: spindle.Other},
	} {
		_, _, err := readFrame(bytes.NewReader(tc.in), 10)
		switch {
		case tc.eof:
			if err != io.EOF {
				t.Errorf("readFrame(%x): %v, want io.EOF", tc.in, err)
			}
		case err == nil || err == io.EOF || spindle.KindOf(err) != tc.kind:
			t.Errorf("readFrame(%x): %v, want kind %v", tc.in, err, tc.kind)
		}
	}
}

func TestReadFrameSizes(t *testing.T) {
	for _, n := range []int{0, 1, initialFrameBuf - 1, initialFrameBuf, initialFrameBuf + 1, 3*initialFrameBuf + 7, DefaultMaxFrame} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		in := append([]byte{tagData, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, payload...)
		tag, buf, err := readFrame(bytes.NewReader(in), DefaultMaxFrame)
		if err != nil || tag != tagData || !bytes.Equal(buf, payload) {
			t.Fatalf("frame of %d bytes: tag %d, %d bytes, %v", n, tag, len(buf), err)
		}
		if n > 0 {
			if _, _, err := readFrame(bytes.NewReader(in[:len(in)-1]), DefaultMaxFrame); err == nil || err == io.EOF {
				t.Fatalf("frame of %d bytes cut short: %v", n, err)
			}
		}
	}
}
