package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// storeKind is a Store under test with a way to reach its raw bytes.
type storeKind struct {
	name  string
	new   func(t *testing.T) Store
	bytes func(t *testing.T, s Store, u spindle.UserName) []byte
	set   func(t *testing.T, s Store, u spindle.UserName, b []byte)
	cuts  func(t *testing.T, s Store, u spindle.UserName) int
}

func storeKinds() []storeKind {
	return []storeKind{
		{
			name:  "mem",
			new:   func(t *testing.T) Store { return &MemStore{} },
			bytes: func(t *testing.T, s Store, u spindle.UserName) []byte { return s.(*MemStore).Bytes(u) },
			set:   func(t *testing.T, s Store, u spindle.UserName, b []byte) { s.(*MemStore).SetBytes(u, b) },
			cuts:  func(t *testing.T, s Store, u spindle.UserName) int { return len(s.(*MemStore).Cuts(u)) },
		},
		{
			name: "disk",
			new: func(t *testing.T) Store {
				s, err := DiskStore(filepath.Join(t.TempDir(), "dirlogs"))
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			bytes: func(t *testing.T, s Store, u spindle.UserName) []byte {
				b, err := os.ReadFile(filepath.Join(s.(*diskStore).dir, string(u)+logSuffix))
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			set: func(t *testing.T, s Store, u spindle.UserName, b []byte) {
				if err := os.WriteFile(filepath.Join(s.(*diskStore).dir, string(u)+logSuffix), b, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			cuts: func(t *testing.T, s Store, u spindle.UserName) int {
				m, _ := filepath.Glob(filepath.Join(s.(*diskStore).dir, string(u)+logSuffix+".damaged-*"))
				return len(m)
			},
		},
	}
}

func scanAll(t *testing.T, l Log) ([]string, error) {
	var got []string
	err := l.Scan(context.Background(), func(b []byte) error {
		got = append(got, string(b))
		return nil
	})
	return got, err
}

// TestStore is the suite every Store passes.
func TestStore(t *testing.T) {
	ctx := context.Background()
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			s := k.new(t)
			l, err := s.Open(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := scanAll(t, l); err != nil || len(got) != 0 {
				t.Fatalf("new log: %q, %v", got, err)
			}
			var want []string
			for i := 0; i < 5; i++ {
				rec := fmt.Sprintf("record %d %s", i, strings.Repeat("x", i*100))
				if err := l.Append(ctx, []byte(rec)); err != nil {
					t.Fatal(err)
				}
				want = append(want, rec)
			}
			if err := l.Append(ctx, nil); err == nil {
				t.Fatal("empty record accepted")
			}
			l.Close()
			users, err := s.Users(ctx)
			if err != nil || len(users) != 1 || users[0] != ann {
				t.Fatalf("Users = %v, %v", users, err)
			}
			l, _ = s.Open(ctx, ann)
			got, err := scanAll(t, l)
			if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("reopened: %q, %v", got, err)
			}
			l.Close()

			good := k.bytes(t, s, ann)
			// Cut the log at every byte inside its last record: Scan
			// returns the records before it and an Integrity error.
			lastStart := len(good) - (dirlog.FrameSize + len(want[4]))
			for n := lastStart + 1; n < len(good); n++ {
				k.set(t, s, ann, good[:n])
				l, _ := s.Open(ctx, ann)
				got, err := scanAll(t, l)
				var te *dirlog.TailError
				if !errors.As(err, &te) || spindle.KindOf(err) != spindle.Integrity || te.Records != 4 || len(got) != 4 {
					t.Fatalf("cut at %d: got %d records, %v", n, len(got), err)
				}
				l.Close()
			}
			// Flip a byte of the third record: two survive, and Truncate
			// cuts the rest, keeping the cut bytes.
			bad := append([]byte(nil), good...)
			bad[lastStart-dirlog.FrameSize-len(want[3])-dirlog.FrameSize-len(want[2])+dirlog.FrameSize+3] ^= 0xff
			k.set(t, s, ann, bad)
			l, _ = s.Open(ctx, ann)
			got, err = scanAll(t, l)
			if spindle.KindOf(err) != spindle.Integrity || len(got) != 2 {
				t.Fatalf("corrupted third record: %d records, %v", len(got), err)
			}
			if _, err := l.Truncate(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if k.cuts(t, s, ann) != 1 {
				t.Fatal("cut bytes not kept")
			}
			if err := l.Append(ctx, []byte("after the cut")); err != nil {
				t.Fatal(err)
			}
			l.Close()
			l, _ = s.Open(ctx, ann)
			got, err = scanAll(t, l)
			if err != nil || len(got) != 3 || got[2] != "after the cut" {
				t.Fatalf("after truncate and append: %q, %v", got, err)
			}
			l.Close()
		})
	}
}

// A Scan that its function stops early, as Entries stops once it has a
// page, leaves the next Append writing at the end of the log, not after
// the last record it read: appends after a short read lose nothing.
func TestStoreScanStoppedEarly(t *testing.T) {
	ctx := context.Background()
	stop := errors.New("stop")
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			s := k.new(t)
			l, err := s.Open(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var want []string
			for i := range 6 {
				rec := fmt.Sprintf("record %d", i)
				if err := l.Append(ctx, []byte(rec)); err != nil {
					t.Fatal(err)
				}
				want = append(want, rec)
				if i%2 == 1 {
					n := 0
					if err := l.Scan(ctx, func([]byte) error {
						if n++; n == 1 {
							return stop
						}
						return nil
					}); err != stop {
						t.Fatalf("Scan stopped by its function returned %v", err)
					}
				}
			}
			got, err := scanAll(t, l)
			if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("after appends between short scans: %q, %v; want %q", got, err, want)
			}
		})
	}
}

// ScanFrom reads the records from one on, whether the log knows where
// they are (appended to) or not (just opened), and nothing past the end.
func TestStoreScanFrom(t *testing.T) {
	ctx := context.Background()
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			s := k.new(t)
			l, err := s.Open(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range 7 {
				rec := fmt.Sprintf("record %d %s", i, strings.Repeat("y", i*50))
				if err := l.Append(ctx, []byte(rec)); err != nil {
					t.Fatal(err)
				}
				want = append(want, rec)
			}
			from := func(l Log, first int) []string {
				var got []string
				if err := l.ScanFrom(ctx, first, func(b []byte) error { got = append(got, string(b)); return nil }); err != nil {
					t.Fatal(err)
				}
				return got
			}
			for first := 0; first <= len(want)+1; first++ {
				wantFrom := want[min(first, len(want)):]
				if got := from(l, first); strings.Join(got, "|") != strings.Join(wantFrom, "|") {
					t.Fatalf("appended log from %d: %q, want %q", first, got, wantFrom)
				}
			}
			l.Close()
			l, _ = s.Open(ctx, ann)
			defer l.Close()
			if got := from(l, 4); strings.Join(got, "|") != strings.Join(want[4:], "|") {
				t.Fatalf("reopened log from 4: %q, want %q", got, want[4:])
			}
		})
	}
}
