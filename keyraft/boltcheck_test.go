package keyraft

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltSeed returns the bytes of a small bolt database shaped like
// raft-boltdb's: a bucket of log entries and one of stable values.
func boltSeed(f *testing.F) []byte {
	f.Helper()
	path := filepath.Join(f.TempDir(), "seed.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		f.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		logs, err := tx.CreateBucket([]byte("logs"))
		if err != nil {
			return err
		}
		for i := 0; i < 200; i++ {
			if err := logs.Put([]byte{0, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)}, make([]byte, 100+i)); err != nil {
				return err
			}
		}
		conf, err := tx.CreateBucket([]byte("conf"))
		if err != nil {
			return err
		}
		return conf.Put([]byte("CurrentTerm"), []byte{0, 0, 0, 0, 0, 0, 0, 2})
	})
	if err != nil {
		f.Fatal(err)
	}
	db.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzCheckPages feeds damaged bolt files to checkPages, which must never
// panic or loop, and checks its promise: bolt reads every file it passes
// without panicking or looping.
func FuzzCheckPages(f *testing.F) {
	seed := boltSeed(f)
	f.Add(seed, 0, byte(0))
	f.Add(seed, 4096*2+9, byte(0xFF))
	f.Add(seed, 4096*3+24, byte(0x01))
	f.Fuzz(func(t *testing.T, data []byte, off int, x byte) {
		if len(data) > 1<<20 {
			return
		}
		data = append([]byte(nil), data...)
		if off >= 0 && off < len(data) {
			data[off] ^= x
		}
		path := filepath.Join(t.TempDir(), "raft.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := checkPages(path); err != nil || len(data) == 0 {
			return
		}
		done := make(chan error, 1)
		go func() { done <- safely(func() error { return checkBolt(path) }) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("bolt loops on a file checkPages passed")
		}
	})
}
