package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/client"
	"spindle.dev/pack"
)

const cpUsage = `Usage:
    spin cp [-R] [-u] [-packing P] [-j N] SRC DST
    spin cp [-R] [-u] [-packing P] [-j N] SRC... DIR

Copies files from the local file system to spin, from spin to the local
file system, or within spin. Names that start with @ or with a user name
(ann@example.com/dir) are in spin; all others are local (write ./name for a
local file whose name looks like a spin path). With several sources, or
when DST is an existing directory, each source is copied into it under its
own name, as cp does. A source directory written with a trailing /
(photos/) stands for its contents, as with rsync: they are copied into
DST itself, whether or not it exists. Files are copied several at a time.

An interrupted copy is finished by copying again with -u and the source
written with a trailing /, which sends only what is missing; cp prints
the command when it is interrupted or stops because the node is gone:
    $ spin cp -R -u photos/ @/photos

Options:
    -R, -recursive   copy directories and everything below them
    -u, -update      skip files whose destination already holds the same
                     contents (compared, not dated as by GNU cp -u): the
                     same size, and the source packed as the destination
                     was (with its key, for ee) gives the same block
                     hashes. Nothing is sent for them, and nothing
                     fetched, except the source of a copy within spin.
                     Other files are copied, replacing what is there
    -p, -packing P   packing of files written to spin: ee, eeintegrity or
                     plain; default: the config's packing, or ee
    -j, -jobs N      copy N files at once (default 16)
    -at WHEN         read spin sources as they were at
                     WHEN: a sequence number, a negative number for
                     entries back, a time
                     (2026-12-04T15:04:05Z) or a date (2026-12-04,
                     the end of that day, UTC); see spin history
    -h, -help        print this text

cp stops, saying how far it got, once 5 files in a row have failed with
I/O errors: the node has most likely gone away.

Example:
    $ spin cp -R photos @/photos
    $ spin cp @/docs/report.pdf bob@example.com/pub/plans.txt .
`

// cpWorkers is the number of files cp copies at once unless -j says
// otherwise, and rm -R removes. Every file is a few round trips to the peer,
// so copying many small files is bound by latency, not bandwidth; and the
// more files wait at once to be entered in the directory log, the more go
// in one batch (one round trip and one fsync). 16 copy many small files
// faster than 8, and 32 no faster than 16 (docs/performance.md). The
// client bounds the
// blocks in flight for all files together, so large files take no more
// memory.
const cpWorkers = 16

func runCp(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
	update := flags.Bool("update", false, "")
	flags.BoolVar(update, "u", false, "")
	packingName := flags.String("packing", "", "")
	flags.StringVar(packingName, "p", "", "")
	jobs := flags.Int("jobs", cpWorkers, "")
	flags.IntVar(jobs, "j", cpWorkers, "")
	at := atFlag(flags)
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if *jobs < 1 || *jobs > 256 {
		return usagef("-jobs: want 1 to 256 files at once, not %d", *jobs)
	}
	if flags.NArg() < 2 {
		return usagef("want SRC and DST, %s", gotArgs(flags.NArg()))
	}
	packing, err := parsePacking(*packingName)
	if err != nil {
		return err
	}
	srcArgs, dstArg := flags.Args()[:flags.NArg()-1], flags.Arg(flags.NArg()-1)
	for _, s := range srcArgs {
		if !isSpinPath(s) && !isSpinPath(dstArg) {
			return usagef("%s and %s are both local: one of SRC and DST must be a spin path", s, dstArg)
		}
		if s == "-" {
			return usagef("cp cannot read stdin; use: spin put - PATH")
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	if c, err = st.pastClient(ctx, c, *at); err != nil {
		return err
	}
	cp := &copier{st: st, c: c, recursive: *recursive, update: *update, packing: packing, workers: *jobs}
	dst, err := cp.endpoint(dstArg)
	if err != nil {
		return err
	}
	dstIsDir, err := cp.isDir(ctx, dst)
	if err != nil {
		return err
	}
	if dirPath(dstArg) && !dstIsDir && !*recursive {
		st.errorf("%s: not a directory: DST ends in / but there is no such directory", dstArg)
		st.hint("to copy to a file, name the file without a trailing /")
		return errFailed
	}
	if len(srcArgs) > 1 && !dstIsDir {
		st.errorf("%s: not a directory", dst)
		st.hint("to copy several files, DST must be an existing directory")
		return errFailed
	}
	cp.resume = resumeArgs(*recursive, *packingName, *jobs, srcArgs, dstArg)
	for _, s := range srcArgs {
		src, err := cp.endpoint(s)
		if err != nil {
			cp.failed = true
			continue
		}
		target := dst
		contents := contentsArg(s)
		if dstIsDir && !contents {
			target = dst.join(src.base())
		}
		if isDir := cp.planTop(ctx, src, target, contents); isDir && len(srcArgs) == 1 && !dstIsDir && !contents {
			// Copied again as it was named, the directory would now go
			// inside the copy made this time: name its contents instead.
			cp.resume = resumeArgs(*recursive, *packingName, *jobs, []string{s + "/"}, dstArg)
		}
	}
	cp.run(ctx)
	if cp.failed {
		return errFailed
	}
	return nil
}

// contentsArg reports whether the source argument arg names a directory's
// contents rather than the directory: whether it ends in /, as in rsync.
// A user's root, written @ or ann@example.com, is copied under the user's
// name; written @/ or ann@example.com/, it stands for its contents.
func contentsArg(arg string) bool {
	return strings.HasSuffix(arg, "/") || strings.HasSuffix(arg, string(filepath.Separator))
}

// resumeArgs returns the arguments of the cp command that finishes a copy
// made with these: the same, with -u.
func resumeArgs(recursive bool, packing string, jobs int, srcArgs []string, dstArg string) []string {
	args := []string{"cp"}
	if recursive {
		args = append(args, "-R")
	}
	args = append(args, "-u")
	if packing != "" {
		args = append(args, "-packing", packing)
	}
	if jobs != cpWorkers {
		args = append(args, "-j", strconv.Itoa(jobs))
	}
	args = append(args, srcArgs...)
	return append(args, dstArg)
}

// shellQuote returns args as one line a POSIX shell reads back as args.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// An endpoint is a file or directory, local or in spin.
type endpoint struct {
	spin  bool
	name  spindle.PathName // Clean spin path name, if spin.
	local string           // Local file name, if not spin.
}

func (e endpoint) String() string {
	if e.spin {
		return string(e.name)
	}
	return e.local
}

// join returns the endpoint for elem inside the directory e.
func (e endpoint) join(elem string) endpoint {
	if e.spin {
		return endpoint{spin: true, name: join(e.name, elem)}
	}
	return endpoint{local: filepath.Join(e.local, elem)}
}

// base returns the name e is copied under into a directory.
func (e endpoint) base() string {
	if !e.spin {
		b := filepath.Base(e.local)
		if b == "." || b == ".." || b == string(filepath.Separator) {
			if abs, err := filepath.Abs(e.local); err == nil {
				b = filepath.Base(abs)
			}
		}
		return b
	}
	if b := base(e.name); b != "" {
		return b
	}
	p, _ := spindle.Parse(e.name)
	return string(p.User()) // A user's root is copied under the user's name.
}

// A copyJob copies one file, or makes one link.
type copyJob struct {
	src, dst endpoint
	link     spindle.PathName  // If set, make dst a link to this target.
	size     int64             // Plaintext size, if known, for the progress line.
	dir      int               // Index in copier.dirs of dst's directory, or -1.
	entry    *spindle.DirEntry // The source's entry, if it is in spin (with -u).
	existing *spindle.DirEntry // The destination's entry, if it is in spin and exists (with -u).
}

// maxFailStreak is how many files in a row may fail with I/O or temporary
// errors before cp stops. When the node goes away every file fails, one
// after the other, with the same error, and trying thousands of them says
// nothing more; failures that are about one file (permission denied, no
// such file) do not count.
const maxFailStreak = 5

// A copier plans a copy, directories first and then files, and runs it.
type copier struct {
	st        *State
	c         spindle.Client
	recursive bool
	update    bool // Skip files whose destination holds the same contents.
	packing   spindle.Packing
	workers   int       // Files copied at once.
	pb        *progress // The progress line while files are copied, if any.
	resume    []string  // The arguments that finish this copy if it stops.

	dirs      []endpoint // Directories to make, parents before children.
	dirParent []int      // Index of each directory's parent in dirs, or -1.
	dirFailed []bool
	jobs      []copyJob
	existing  map[spindle.PathName]*spindle.DirEntry // With -u: entries found in spin destination directories.

	keysOnce sync.Once
	keys     *pack.Keys // With -u, to compare ee files; nil if they cannot be loaded.

	mu          sync.Mutex // Guards what follows while the jobs run.
	failed      bool
	interrupted bool      // An interruption has been seen; it is reported at the end.
	copied      int       // Files copied.
	bytes       int64     // Their bytes.
	began       time.Time // When the files started to be copied.
	skipped     int       // Files found already copied (-u).
	streak      int       // I/O failures since the last file copied.
	started     int64     // Jobs started so far, each stamped with the count (see begin).
	streakFrom  int64     // started when the streak's first failure came.
	held        []failure // Those failures, reported unless the streak stops the copy.
	stopped     *failure  // The failure that stopped the copy.
	stop        context.CancelFunc
}

// A failure is a file that could not be copied, and why.
type failure struct {
	path string
	err  error
}

// endpoint interprets a command-line argument.
func (cp *copier) endpoint(arg string) (endpoint, error) {
	if !isSpinPath(arg) {
		return endpoint{local: arg}, nil
	}
	name, err := cp.st.spinPath(cp.c, arg)
	if err != nil {
		return endpoint{}, err
	}
	return endpoint{spin: true, name: name}, nil
}

// isDir reports whether e exists and is a directory (following links).
func (cp *copier) isDir(ctx context.Context, e endpoint) (bool, error) {
	if !e.spin {
		info, err := os.Stat(e.local)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, cp.st.fail(e.local, err)
		}
		return info.IsDir(), nil
	}
	entry, err := cp.c.Lookup(ctx, e.name, true)
	if errors.Is(err, spindle.NotExist) || errors.Is(err, spindle.Private) || errors.Is(err, spindle.Permission) {
		// A user who may create but not look may still copy a file there.
		return false, nil
	}
	if err != nil {
		return false, cp.st.fail(string(e.name), err)
	}
	return entry.Attr.IsDir(), nil
}

// fail reports a failure; it is safe for concurrent use. An interruption
// is reported once, at the end, not once for every file in flight.
func (cp *copier) fail(path string, err error) {
	cp.mu.Lock()
	cp.failed = true
	quiet := cp.interrupted || cp.stopped != nil
	if errors.Is(err, context.Canceled) {
		// Unless the copy stopped itself, Ctrl-C cancelled it.
		cp.interrupted = cp.interrupted || cp.stopped == nil
		quiet = true
	}
	cp.mu.Unlock()
	if !quiet {
		cp.pb.above(func() { cp.st.fail(path, err) })
	}
}

// begin stamps a job as it starts: the stamp orders it against the
// failures that come while it runs (see finished).
func (cp *copier) begin() int64 {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.started++
	return cp.started
}

// finished records the outcome of a job, stamped by begin, or with dir
// set of making a directory: done (for a file, copied or with skipped set
// found already there), or failed on path with err. I/O failures are held
// while they come in a row: a file started after the first of them and
// then copied has them reported, and the maxFailStreak-th stops the copy.
// A file that started before the streak and finishes during it (its
// write was in flight when the node went away) says nothing of whether
// the node is back. It is safe for concurrent use.
func (cp *copier) finished(dir, skipped bool, stamp int64, path string, err error) {
	cp.mu.Lock()
	switch {
	case err == nil:
		switch {
		case dir:
		case skipped:
			cp.skipped++
		default:
			cp.copied++
		}
		if cp.streak > 0 && stamp <= cp.streakFrom {
			cp.mu.Unlock()
			return
		}
		cp.streak = 0
		held := cp.held
		cp.held = nil
		cp.mu.Unlock()
		cp.pb.above(func() {
			for _, f := range held {
				cp.st.fail(f.path, f.err)
			}
		})
		return
	case cp.stopped != nil || cp.interrupted:
		// Files in flight when the copy stopped; the stop says enough.
		cp.failed = true
		cp.mu.Unlock()
		return
	case errors.Is(err, context.Canceled):
		cp.mu.Unlock()
		cp.fail(path, err)
		return
	case errors.Is(err, spindle.IO) || errors.Is(err, spindle.Transient):
		cp.failed = true
		if cp.streak == 0 {
			cp.streakFrom = cp.started
		}
		cp.streak++
		cp.held = append(cp.held, failure{path, err})
		if cp.streak >= maxFailStreak {
			cp.stopped = &failure{path, err}
			cp.held = nil
			cp.stop()
		}
		cp.mu.Unlock()
		return
	}
	cp.mu.Unlock()
	cp.fail(path, err)
}

// report says, once the jobs have run, what stopped the copy early (an
// interruption, or the node going away), how far it got and how to finish
// it; and reports the failures still held.
func (cp *copier) report() {
	for _, f := range cp.held {
		cp.st.fail(f.path, f.err)
	}
	cp.held = nil
	done := fmt.Sprintf("%d of %d files copied", cp.copied, len(cp.jobs))
	if cp.skipped > 0 {
		done += fmt.Sprintf(", %d found already copied", cp.skipped)
	}
	resume := shellQuote(cp.resume)
	switch {
	case cp.stopped != nil:
		cp.st.fail(cp.stopped.path, cp.stopped.err)
		cp.st.errorf("stopped after %d files in a row failed: %s", maxFailStreak, done)
		var down *client.SequencerDownError
		if errors.As(cp.stopped.err, &down) {
			cp.st.hint("once the tree's sequencer answers again (or another dir host takes the writes), finish the copy, sending only what is missing, with: spin %s", resume)
		} else {
			cp.st.hint("once the node answers again, finish the copy, sending only what is missing, with: spin %s", resume)
		}
	case cp.interrupted:
		cp.st.errorf("interrupted: %s", done)
		cp.st.hint("to finish the copy, sending only what is missing, use: spin %s", resume)
	case cp.pb == nil && len(cp.jobs) > 0:
		// No progress line (not a terminal): one line for scripts.
		fmt.Fprintf(cp.st.Stdout, "%s, %s, in %s\n", done, formatBytes(cp.bytes), time.Since(cp.began).Round(time.Millisecond))
	}
}

// planTop plans the copy of the source named on the command line, or with
// contents set, of what is in it, and reports whether it is a directory.
func (cp *copier) planTop(ctx context.Context, src, dst endpoint, contents bool) bool {
	if src.spin {
		entry, err := cp.c.Lookup(ctx, src.name, true)
		if err != nil {
			cp.fail(src.String(), err)
			return false
		}
		if contents && !entry.Attr.IsDir() {
			cp.notDir(src)
			return false
		}
		cp.planSpin(ctx, entry, src, dst, -1, true)
		return entry.Attr.IsDir()
	}
	info, err := os.Stat(src.local)
	if err != nil {
		cp.fail(src.local, err)
		return false
	}
	if contents && !info.IsDir() {
		cp.notDir(src)
		return false
	}
	cp.planLocal(ctx, info, src, dst, -1, true)
	return info.IsDir()
}

func (cp *copier) notDir(src endpoint) {
	cp.st.errorf("%s: not a directory: a source that ends in / names a directory's contents", src)
	cp.st.hint("to copy the file, name it without a trailing /")
	cp.failed = true
}

func (cp *copier) notRecursive(src, dst endpoint) {
	cp.st.errorf("%s: is a directory", src)
	cp.st.hint("to copy a directory, use: spin cp -R %s %s", src, dst)
	cp.failed = true
}

// addDir adds a directory to make and returns its index. With -u, it
// first learns what a spin destination directory holds, in one request,
// so that every file in it is checked without one of its own.
func (cp *copier) addDir(ctx context.Context, dst endpoint, parent int) int {
	if cp.update && dst.spin && cp.mayExist(dst, parent) {
		cp.learn(ctx, dst.name)
	}
	cp.dirs = append(cp.dirs, dst)
	cp.dirParent = append(cp.dirParent, parent)
	return len(cp.dirs) - 1
}

// mayExist reports whether the spin directory dst, to be made in the
// directory with index parent (-1 for none), may exist already: whether it
// was found there, or parent is not one cp makes.
func (cp *copier) mayExist(dst endpoint, parent int) bool {
	if parent < 0 {
		return true
	}
	_, ok := cp.existing[dst.name]
	return ok
}

// learn records the entries in the spin directory dir. A directory that
// does not exist, or cannot be listed, holds nothing cp need not copy.
func (cp *copier) learn(ctx context.Context, dir spindle.PathName) {
	entries, err := cp.c.Glob(ctx, children(dir))
	if err != nil {
		return
	}
	if cp.existing == nil {
		cp.existing = make(map[spindle.PathName]*spindle.DirEntry)
	}
	for _, e := range entries {
		cp.existing[e.Name] = e
	}
}

// lookupExisting returns, with -u, the entry of the spin file dst if it
// exists, to be compared with its source before copying; nil otherwise.
func (cp *copier) lookupExisting(ctx context.Context, dst endpoint, parent int) *spindle.DirEntry {
	if !cp.update || !dst.spin {
		return nil
	}
	if parent >= 0 {
		return cp.existing[dst.name]
	}
	e, err := cp.c.Lookup(ctx, dst.name, false)
	if err != nil {
		return nil
	}
	return e
}

// planSpin plans the copy of the spin entry at src to dst.
func (cp *copier) planSpin(ctx context.Context, entry *spindle.DirEntry, src, dst endpoint, parent int, top bool) {
	switch {
	case entry.Attr.IsLink() && dst.spin && !top:
		cp.jobs = append(cp.jobs, copyJob{src: src, dst: dst, link: entry.Link, dir: parent})
	case entry.Attr.IsDir():
		if !cp.recursive {
			cp.notRecursive(src, dst)
			return
		}
		d := cp.addDir(ctx, dst, parent)
		entries, err := cp.c.Glob(ctx, children(src.name))
		if err != nil {
			cp.fail(src.String(), err)
			return
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		for _, e := range entries {
			elem := base(e.Name)
			if e.Attr.IsLink() && !dst.spin {
				// Follow the link to copy what it names.
				target, err := cp.c.Lookup(ctx, e.Name, true)
				if err != nil {
					cp.fail(string(e.Name), err)
					continue
				}
				if target.Attr.IsDir() {
					cp.st.errorf("%s: not copied: a link to a directory", e.Name)
					cp.failed = true
					continue
				}
				e = target
			}
			cp.planSpin(ctx, e, src.join(elem), dst.join(elem), d, false)
		}
	default:
		cp.jobs = append(cp.jobs, copyJob{src: src, dst: dst, size: entry.Size, dir: parent, entry: entry, existing: cp.lookupExisting(ctx, dst, parent)})
	}
}

// planLocal plans the copy of the local file src, described by info (after
// following links), to dst.
func (cp *copier) planLocal(ctx context.Context, info fs.FileInfo, src, dst endpoint, parent int, top bool) {
	switch {
	case info.IsDir():
		if !cp.recursive {
			cp.notRecursive(src, dst)
			return
		}
		d := cp.addDir(ctx, dst, parent)
		ents, err := os.ReadDir(src.local)
		if err != nil {
			cp.fail(src.local, err)
			return
		}
		for _, de := range ents {
			child := src.join(de.Name())
			info, err := os.Stat(child.local)
			if err != nil {
				cp.fail(child.local, err)
				continue
			}
			if info.IsDir() && de.Type()&fs.ModeSymlink != 0 {
				cp.st.errorf("%s: not copied: a link to a directory", child.local)
				cp.failed = true
				continue
			}
			cp.planLocal(ctx, info, child, dst.join(de.Name()), d, false)
		}
	case info.Mode().IsRegular():
		cp.jobs = append(cp.jobs, copyJob{src: src, dst: dst, size: info.Size(), dir: parent, existing: cp.lookupExisting(ctx, dst, parent)})
	default:
		cp.st.errorf("%s: not copied: not a regular file", src.local)
		cp.failed = true
	}
}

// run makes the planned directories in order, then copies the files,
// cp.workers at a time, and reports how it ended. Files inside a directory
// that could not be made are skipped, since the failure has been reported
// once already.
func (cp *copier) run(ctx context.Context) {
	ctx, cp.stop = context.WithCancel(ctx)
	defer cp.stop()
	defer cp.report()
	cp.dirFailed = make([]bool, len(cp.dirs))
	for i, d := range cp.dirs {
		if p := cp.dirParent[i]; p >= 0 && cp.dirFailed[p] {
			cp.dirFailed[i] = true
			continue
		}
		if ctx.Err() != nil {
			cp.fail("", ctx.Err())
			return
		}
		stamp := cp.begin()
		err := cp.mkdir(ctx, d)
		cp.finished(true, false, stamp, d.String(), err)
		cp.dirFailed[i] = err != nil
	}
	var total int64
	for _, j := range cp.jobs {
		total += j.size
	}
	pb := cp.st.progressFiles(total, len(cp.jobs), "cp")
	cp.pb = pb
	cp.began = time.Now()
	jobs := make(chan *copyJob)
	var wg sync.WaitGroup
	for range min(cp.workers, len(cp.jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if ctx.Err() != nil { // Stopped, or interrupted: start no more.
					cp.fail("", ctx.Err())
					continue
				}
				stamp := cp.begin()
				skipped, path, err := cp.copy(ctx, j, pb)
				switch {
				case err != nil:
				case skipped:
					pb.fileSkipped(j.size)
				default:
					pb.fileDone()
					cp.mu.Lock()
					cp.bytes += j.size
					cp.mu.Unlock()
				}
				cp.finished(false, skipped, stamp, path, err)
			}
		}()
	}
	for i := range cp.jobs {
		j := &cp.jobs[i]
		if j.dir >= 0 && cp.dirFailed[j.dir] {
			continue
		}
		if ctx.Err() != nil {
			cp.fail("", ctx.Err())
			break
		}
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	pb.done(!cp.failed)
}

// mkdir makes the directory d; one that exists already is fine.
func (cp *copier) mkdir(ctx context.Context, d endpoint) error {
	if e := cp.existing[d.name]; d.spin && e != nil && e.Attr.IsDir() {
		return nil // Seen by -u: no request, which might ask for a right not needed.
	}
	if !d.spin {
		err := os.Mkdir(d.local, 0o777)
		if errors.Is(err, fs.ErrExist) {
			if info, serr := os.Stat(d.local); serr == nil && info.IsDir() {
				return nil
			}
		}
		return err
	}
	_, err := cp.c.MakeDirectory(ctx, d.name)
	if errors.Is(err, spindle.Exist) {
		if e, lerr := cp.c.Lookup(ctx, d.name, true); lerr == nil && e.Attr.IsDir() {
			return nil
		}
	}
	return err
}

// copy runs one job. It reports whether the job was skipped (with -u,
// the destination holds the same contents) and, if it failed, the path
// the failure is about.
func (cp *copier) copy(ctx context.Context, j *copyJob, pb *progress) (skipped bool, path string, err error) {
	c := cp.c
	switch {
	case j.link != "":
		_, err := c.PutLink(ctx, j.link, j.dst.name)
		return false, j.dst.String(), err
	case !j.src.spin: // Local to spin.
		f, err := os.Open(j.src.local)
		if err != nil {
			return false, j.src.local, err
		}
		defer f.Close()
		if j.existing != nil && j.existing.Size == j.size {
			same, err := cp.same(j.existing, f)
			if err != nil {
				return false, j.src.local, err
			}
			if same {
				return true, "", nil
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return false, j.src.local, err
			}
		}
		return false, j.dst.String(), cp.put(ctx, j.dst.name, pb.reader(f))
	case !j.dst.spin: // Spin to local.
		if cp.update && j.entry != nil {
			if same, err := cp.sameLocal(j.entry, j.dst.local); err != nil {
				return false, j.dst.local, err
			} else if same {
				return true, "", nil
			}
		}
		f, err := c.Open(ctx, j.src.name)
		if err != nil {
			return false, j.src.String(), err
		}
		defer f.Close()
		err = writeLocal(j.dst.local, func(w io.Writer) error {
			_, err := copyData(pb.writer(w), f)
			return err
		})
		var le *localError
		if errors.As(err, &le) {
			return false, j.dst.local, le.err
		}
		return false, j.src.String(), err
	default: // Spin to spin.
		if j.existing != nil && j.existing.Size == j.size {
			// Only the source's contents can show whether the
			// destination holds them: it is read, but not sent.
			f, err := c.Open(ctx, j.src.name)
			if err != nil {
				return false, j.src.String(), err
			}
			same, err := cp.same(j.existing, f)
			f.Close()
			if err != nil {
				return false, j.src.String(), err
			}
			if same {
				return true, "", nil
			}
		}
		f, err := c.Open(ctx, j.src.name)
		if err != nil {
			return false, j.src.String(), err
		}
		defer f.Close()
		return false, j.dst.String(), cp.put(ctx, j.dst.name, pb.reader(f))
	}
}

// put stores r as name; a *spindle.Warning is reported as such and counts
// as success, since the file was stored.
func (cp *copier) put(ctx context.Context, name spindle.PathName, r io.Reader) error {
	_, err := cp.c.Put(ctx, name, r, cp.packing, nil)
	warned := false
	if err != nil {
		cp.pb.above(func() { warned = cp.st.warned(err) })
	}
	if warned {
		return nil
	}
	return err
}

// same reports whether r holds the contents that the spin entry e
// describes (see pack.Same): the sizes match, and r packed as e was gives
// the same blocks; for an Access or Group file, r holds its text. An entry
// that cannot be compared so (an ee file whose key cp cannot unwrap) is not
// the same; only a failure to read r is an error.
func (cp *copier) same(e *spindle.DirEntry, r io.Reader) (bool, error) {
	if e.Attr.IsDir() || e.Attr.IsLink() {
		return false, nil
	}
	if access.IsAccessFile(e.Name) || access.IsGroupFile(e.Name) {
		// The text travels in the entry, which the client has checked
		// against its owner's signed log entry. Putting it again would
		// re-wrap the keys of every file it governs.
		data, err := io.ReadAll(io.LimitReader(r, int64(len(e.Inline))+1))
		if err != nil {
			return false, spindle.E(spindle.IO, err)
		}
		return bytes.Equal(data, e.Inline), nil
	}
	cp.keysOnce.Do(func() {
		if cfg := cp.st.Config; cfg != nil && cfg.Secrets != "" {
			cp.keys, _ = pack.Load(cfg.Secrets) // Without keys, only plain and eeintegrity files compare.
		}
	})
	same, err := pack.Same(e, r, cp.keys)
	if errors.Is(err, spindle.IO) {
		return false, err
	}
	return same && err == nil, nil
}

// sameLocal reports whether the local file name holds the contents the
// spin entry e describes.
func (cp *copier) sameLocal(e *spindle.DirEntry, name string) (bool, error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !info.Mode().IsRegular() || info.Size() != e.Size {
		return false, nil
	}
	return cp.same(e, f)
}
