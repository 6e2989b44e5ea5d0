package disk_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/disk"
)

// When SPINDLE_DISK_CRASH_DIR is set, the test binary is the child of
// TestKillDuringPuts: it stores blocks in that directory forever, printing
// each ref once Put has returned.
func TestMain(m *testing.M) {
	if dir := os.Getenv("SPINDLE_DISK_CRASH_DIR"); dir != "" {
		s, err := disk.Open(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for i := range uint64(100000) { // Bounded; the parent kills it long before.
			size := 200000 + int(i%7)*1000
			if i%2 == 1 {
				size = 1000 + int(i%5)*3000 // Small: appended to a segment.
			}
			ref, err := s.Put(context.Background(), blockstest.Block(i, size))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println(ref)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process killed in the middle of Puts leaves every acknowledged block
// intact, no partial block under a block's name, and temp files that the
// next Open removes.
func TestKillDuringPuts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SPINDLE_DISK_CRASH_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []spindle.Ref
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		acked = append(acked, spindle.Ref(sc.Text()))
		if len(acked) == 40 {
			cmd.Process.Kill()
			break
		}
	}
	cmd.Wait()
	if len(acked) < 40 {
		t.Fatalf("child acknowledged only %d blocks", len(acked))
	}

	s := open(t, dir)
	ctx := context.Background()
	for i, ref := range acked {
		if _, err := s.Get(ctx, ref); err != nil {
			t.Errorf("acknowledged block %d: %v", i, err)
		}
	}
	n := 0
	err = s.List(ctx, func(ref spindle.Ref) error {
		n++
		_, err := s.Get(ctx, ref)
		return err
	})
	if err != nil {
		t.Fatalf("a listed block is unreadable: %v", err)
	}
	if n < len(acked) {
		t.Fatalf("List found %d blocks, fewer than the %d acknowledged", n, len(acked))
	}
	ents, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil || len(ents) != 0 {
		t.Fatalf("tmp holds %d files after Open, err %v", len(ents), err)
	}
}
