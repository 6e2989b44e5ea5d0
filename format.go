package spindle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// FormatFile is the name of the file in a node's or a client's home that
// records the version of the home's on-disk formats: every file and
// directory in the home (the block store, the dir logs, the key cluster's
// store, leases, witness state, quotas; a client's config, keys, key log
// and dir heads) is read as that version describes. One marker per home
// keeps the versioning in one place: a change to any one file's format is
// a new home version with a migration step.
const FormatFile = "format"

// A Migration moves a home from version From to From+1. Migrate must be
// crash-safe: it writes each new file beside the old one, fsyncs it and
// renames it into place (ReplaceFile), so that a crash at any point leaves
// a home that the old version still reads, and it must be idempotent, so
// that running it again after such a crash finishes the step. The format
// file is moved to From+1 only after Migrate returns.
type Migration struct {
	From    int
	Migrate func(home string) error
}

// A HomeFormat describes what one kind of home ("node home", "client
// home") holds at the version this program writes.
type HomeFormat struct {
	// Kind names the home in errors: "node home", "client home".
	Kind string
	// Version is the version this program reads and writes.
	Version int
	// Migrations are the steps from older versions, one per version.
	Migrations []Migration
	// Ignore names files that do not make a home hold something, such
	// as a lock taken before the format is read.
	Ignore []string
}

// OpenHome checks home's format version and migrates an older home, one
// step at a time, to f.Version. A home without a format file that holds
// nothing is new and is marked f.Version; one that holds files was
// written before format files existed, which is version 1. A home of a
// newer version than f.Version is refused with an error that says what to
// do. The format file is replaced atomically after each step, so a crash
// between steps leaves a home this program opens again and migrates on.
func (f HomeFormat) OpenHome(home string) error {
	const op Op = "spindle.OpenHome"
	file := filepath.Join(home, FormatFile)
	v, err := f.read(home, file)
	if err != nil {
		return E(op, err)
	}
	if v > f.Version {
		return E(op, Invalid, fmt.Errorf("%s %s is format version %d, but this spin reads versions up to %d: it was written by a newer spin; upgrade spin (go install spindle.dev/cmd/spin@latest) and run it on this home", f.Kind, file, v, f.Version))
	}
	for v < f.Version {
		m, ok := f.step(v)
		if !ok {
			return E(op, Internal, fmt.Errorf("%s %s is format version %d and this spin has no migration from it to %d", f.Kind, file, v, v+1))
		}
		if err := m.Migrate(home); err != nil {
			return E(op, fmt.Errorf("migrating %s %s from format version %d to %d (the home is left at version %d; start again to retry): %w", f.Kind, home, v, v+1, v, err))
		}
		v++
		if err := writeFormat(file, v); err != nil {
			return E(op, err)
		}
	}
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		if err := writeFormat(file, v); err != nil {
			return E(op, err)
		}
	}
	return nil
}

func (f HomeFormat) step(from int) (Migration, bool) {
	for _, m := range f.Migrations {
		if m.From == from {
			return m, true
		}
	}
	return Migration{}, false
}

// read returns the version home's format file names, version 1 for a
// home with files but no format file, and f.Version for an empty home.
func (f HomeFormat) read(home, file string) (int, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		ents, err := os.ReadDir(home)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, E(IO, err)
		}
		ents = slices.DeleteFunc(ents, func(e fs.DirEntry) bool { return slices.Contains(f.Ignore, e.Name()) })
		if len(ents) == 0 {
			return f.Version, nil
		}
		return 1, nil
	}
	if err != nil {
		return 0, E(IO, err)
	}
	s := strings.TrimSpace(string(b))
	s = strings.TrimPrefix(s, "spindle home format ")
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, E(Invalid, fmt.Errorf("%s %s: want \"spindle home format N\", have %q", f.Kind, file, b))
	}
	return v, nil
}

func writeFormat(file string, v int) error {
	return ReplaceFile(file, []byte(fmt.Sprintf("spindle home format %d\n", v)), 0o600, true)
}
