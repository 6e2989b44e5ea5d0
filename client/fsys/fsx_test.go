package fsys_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var fsxSeed = flag.Int64("fsx.seed", 1, "seed of TestFSX's random operations")

// TestFSX applies a seeded random sequence of operations (whole writes,
// writes at offsets, appends, truncates, renames of files and
// directories, mkdir, rmdir, unlink) to the mount and to a local
// directory, and compares the two after each step: the results and errnos
// of the operation, the files and listings it touched, and every 100 steps
// and at the end the whole trees.
func TestFSX(t *testing.T) {
	steps := 2000
	if testing.Short() {
		steps = 300
	}
	env := inproc(t)
	_, root := mount(t, env, ann, 10*time.Second)
	mnt := filepath.Join(root, "fsx")
	loc := filepath.Join(t.TempDir(), "fsx")
	check(t, os.Mkdir(mnt, 0o755))
	check(t, os.Mkdir(loc, 0o755))
	rng := rand.New(rand.NewSource(*fsxSeed))
	dirs := []string{".", "a", "b", "a/c"}
	files := []string{"f", "g", "h", "long"}
	pick := func(s []string) string { return s[rng.Intn(len(s))] }
	anyFile := func() string { return filepath.Join(pick(dirs), pick(files)) }
	data := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	size := func() int {
		if rng.Intn(10) == 0 {
			return rng.Intn(3 << 20) // Up to three blocks.
		}
		return rng.Intn(9000)
	}
	ok := map[string]int{}
	for step := range steps {
		var desc string
		var touched []string
		var op func(base string) error
		switch k := rng.Intn(11); k {
		case 0, 1:
			name, b := anyFile(), data(size())
			desc, touched = fmt.Sprintf("write %s (%d bytes)", name, len(b)), []string{name}
			op = func(base string) error { return os.WriteFile(filepath.Join(base, name), b, 0o644) }
		case 2, 3:
			name, off, b := anyFile(), int64(rng.Intn(12000)), data(rng.Intn(5000))
			desc, touched = fmt.Sprintf("pwrite %s at %d (%d bytes)", name, off, len(b)), []string{name}
			op = func(base string) error {
				f, err := os.OpenFile(filepath.Join(base, name), os.O_RDWR, 0)
				if err != nil {
					return err
				}
				_, err = f.WriteAt(b, off)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			}
		case 4:
			name, b := anyFile(), data(rng.Intn(3000))
			desc, touched = fmt.Sprintf("append %s (%d bytes)", name, len(b)), []string{name}
			op = func(base string) error {
				f, err := os.OpenFile(filepath.Join(base, name), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return err
				}
				_, err = f.Write(b)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			}
		case 5:
			name, n := anyFile(), int64(rng.Intn(10000))
			desc, touched = fmt.Sprintf("truncate %s to %d", name, n), []string{name}
			op = func(base string) error { return os.Truncate(filepath.Join(base, name), n) }
		case 6:
			from, to := anyFile(), anyFile()
			desc, touched = fmt.Sprintf("rename %s %s", from, to), []string{from, to}
			op = func(base string) error { return os.Rename(filepath.Join(base, from), filepath.Join(base, to)) }
		case 7:
			name := anyFile()
			desc, touched = "unlink "+name, []string{name}
			op = func(base string) error { return os.Remove(filepath.Join(base, name)) }
		case 8:
			d := pick(dirs[1:])
			desc, touched = "mkdir "+d, []string{d}
			op = func(base string) error { return os.Mkdir(filepath.Join(base, d), 0o755) }
		case 9:
			d := pick(dirs[1:])
			desc, touched = "rmdir "+d, []string{d}
			op = func(base string) error { return syscall.Rmdir(filepath.Join(base, d)) }
		case 10:
			// Swap the directories a and b, through a third name.
			desc, touched = "rename a b", []string{"a", "b"}
			op = func(base string) error {
				if err := os.Rename(filepath.Join(base, "b"), filepath.Join(base, "x")); err != nil && !errors.Is(err, syscall.ENOENT) {
					return err
				}
				if err := os.Rename(filepath.Join(base, "a"), filepath.Join(base, "b")); err != nil && !errors.Is(err, syscall.ENOENT) {
					return err
				}
				err := os.Rename(filepath.Join(base, "x"), filepath.Join(base, "a"))
				if errors.Is(err, syscall.ENOENT) {
					err = nil
				}
				return err
			}
		}
		errL, errM := op(loc), op(mnt)
		if errnoOf(errL) != errnoOf(errM) {
			t.Fatalf("step %d (seed %d): %s: local %v, mount %v", step, *fsxSeed, desc, errL, errM)
		}
		if errL == nil {
			ok[strings.Fields(desc)[0]]++
		}
		for _, name := range touched {
			compare(t, step, desc, loc, mnt, name)
			compare(t, step, desc, loc, mnt, filepath.Dir(name))
		}
		if step == steps-1 {
			t.Logf("operations that succeeded: %v", ok)
			if len(ok) < 8 {
				t.Fatalf("only %d kinds of operation succeeded", len(ok))
			}
		}
		if step%100 == 99 || step == steps-1 {
			sameTree(t, loc, mnt)
			if t.Failed() {
				t.Fatalf("step %d (seed %d): %s: the trees differ", step, *fsxSeed, desc)
			}
		}
	}
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	if err != nil {
		return syscall.EIO
	}
	return 0
}

// compare fails unless name is the same in both trees: a file's bytes, or
// a directory's names.
func compare(t *testing.T, step int, desc, loc, mnt, name string) {
	t.Helper()
	li, lerr := os.Lstat(filepath.Join(loc, name))
	mi, merr := os.Lstat(filepath.Join(mnt, name))
	if errnoOf(lerr) != errnoOf(merr) {
		t.Fatalf("step %d (seed %d): %s: stat %s: local %v, mount %v", step, *fsxSeed, desc, name, lerr, merr)
	}
	if lerr != nil {
		return
	}
	if li.IsDir() != mi.IsDir() {
		t.Fatalf("step %d (seed %d): %s: %s is a directory on one side only", step, *fsxSeed, desc, name)
	}
	if li.IsDir() {
		ln, mn := names(t, filepath.Join(loc, name)), names(t, filepath.Join(mnt, name))
		if !slices.Equal(ln, mn) {
			t.Fatalf("step %d (seed %d): %s: %s lists %v locally, %v in the mount", step, *fsxSeed, desc, name, ln, mn)
		}
		return
	}
	if li.Size() != mi.Size() {
		t.Fatalf("step %d (seed %d): %s: %s has %d bytes locally, %d in the mount", step, *fsxSeed, desc, name, li.Size(), mi.Size())
	}
	lb, err := os.ReadFile(filepath.Join(loc, name))
	check(t, err)
	mb, err := os.ReadFile(filepath.Join(mnt, name))
	check(t, err)
	if !bytes.Equal(lb, mb) {
		t.Fatalf("step %d (seed %d): %s: %s differs", step, *fsxSeed, desc, name)
	}
}

func names(t *testing.T, dir string) []string {
	ents, err := os.ReadDir(dir)
	check(t, err)
	var s []string
	for _, e := range ents {
		s = append(s, e.Name())
	}
	return s
}
