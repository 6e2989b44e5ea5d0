package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"spindle.dev"
)

const cpUsage = `Usage:
    spin cp [-R] [-packing P] [-j N] SRC DST
    spin cp [-R] [-packing P] [-j N] SRC... DIR

Copies files from the local file system to spin, from spin to the local
file system, or within spin. Names that start with @ or with a user name
(ann@example.com/dir) are in spin; all others are local (write ./name for a
local file whose name looks like a spin path). With several sources, or
when DST is an existing directory, each source is copied into it under its
own name. Files are copied several at a time.

Options:
    -R, -recursive   copy directories and everything below them
    -p, -packing P   packing of files written to spin: ee, eeintegrity or
                     plain; default: the config's packing, or ee
    -j, -jobs N      copy N files at once (default 16)
    -h, -help        print this text

Example:
    $ spin cp -R photos @/photos
    $ spin cp @/docs/report.pdf bob@example.com/pub/plans.txt .
`

// cpWorkers is the number of files cp copies at once unless -j says
// otherwise, and rm -R removes. Every file is a few round trips to the peer,
// so copying many small files is bound by latency, not bandwidth; and the
// more files wait at once to be entered in the directory log, the more go
// in one batch (one round trip and one fsync). 16 copied 2,000 small files
// 7-26% faster than 8, and 32 no faster than 16. The client bounds the
// blocks in flight for all files together, so large files take no more
// memory.
const cpWorkers = 16

func runCp(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
	packingName := flags.String("packing", "", "")
	flags.StringVar(packingName, "p", "", "")
	jobs := flags.Int("jobs", cpWorkers, "")
	flags.IntVar(jobs, "j", cpWorkers, "")
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
	cp := &copier{st: st, c: c, recursive: *recursive, packing: packing, workers: *jobs}
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
	for _, s := range srcArgs {
		src, err := cp.endpoint(s)
		if err != nil {
			cp.failed = true
			continue
		}
		target := dst
		if dstIsDir {
			target = dst.join(src.base())
		}
		cp.planTop(ctx, src, target)
	}
	cp.run(ctx)
	if cp.failed {
		return errFailed
	}
	return nil
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
	link     spindle.PathName // If set, make dst a link to this target.
	size     int64            // Plaintext size, if known, for the progress bar.
	dir      int              // Index in copier.dirs of dst's directory, or -1.
}

// A copier plans a copy, directories first and then files, and runs it.
type copier struct {
	st        *State
	c         spindle.Client
	recursive bool
	packing   spindle.Packing
	workers   int // Files copied at once.

	dirs        []endpoint // Directories to make, parents before children.
	dirParent   []int      // Index of each directory's parent in dirs, or -1.
	dirFailed   []bool
	jobs        []copyJob
	mu          sync.Mutex // Guards failed and interrupted while the jobs run.
	failed      bool
	interrupted bool // An interruption has been reported.
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
// is reported once, not once for every file in flight.
func (cp *copier) fail(path string, err error) {
	cp.mu.Lock()
	cp.failed = true
	quiet := cp.interrupted
	if errors.Is(err, context.Canceled) {
		cp.interrupted = true
		path = ""
	}
	cp.mu.Unlock()
	if !quiet {
		cp.st.fail(path, err)
	}
}

// planTop plans the copy of the source named on the command line.
func (cp *copier) planTop(ctx context.Context, src, dst endpoint) {
	if src.spin {
		entry, err := cp.c.Lookup(ctx, src.name, true)
		if err != nil {
			cp.fail(src.String(), err)
			return
		}
		cp.planSpin(ctx, entry, src, dst, -1, true)
		return
	}
	info, err := os.Stat(src.local)
	if err != nil {
		cp.fail(src.local, err)
		return
	}
	cp.planLocal(info, src, dst, -1, true)
}

func (cp *copier) notRecursive(src, dst endpoint) {
	cp.st.errorf("%s: is a directory", src)
	cp.st.hint("to copy a directory, use: spin cp -R %s %s", src, dst)
	cp.failed = true
}

// addDir adds a directory to make and returns its index.
func (cp *copier) addDir(dst endpoint, parent int) int {
	cp.dirs = append(cp.dirs, dst)
	cp.dirParent = append(cp.dirParent, parent)
	return len(cp.dirs) - 1
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
		d := cp.addDir(dst, parent)
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
				e = &spindle.DirEntry{Name: e.Name, Size: target.Size}
			}
			cp.planSpin(ctx, e, src.join(elem), dst.join(elem), d, false)
		}
	default:
		cp.jobs = append(cp.jobs, copyJob{src: src, dst: dst, size: entry.Size, dir: parent})
	}
}

// planLocal plans the copy of the local file src, described by info (after
// following links), to dst.
func (cp *copier) planLocal(info fs.FileInfo, src, dst endpoint, parent int, top bool) {
	switch {
	case info.IsDir():
		if !cp.recursive {
			cp.notRecursive(src, dst)
			return
		}
		d := cp.addDir(dst, parent)
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
			cp.planLocal(info, child, dst.join(de.Name()), d, false)
		}
	case info.Mode().IsRegular():
		cp.jobs = append(cp.jobs, copyJob{src: src, dst: dst, size: info.Size(), dir: parent})
	default:
		cp.st.errorf("%s: not copied: not a regular file", src.local)
		cp.failed = true
	}
}

// run makes the planned directories in order, then copies the files,
// cp.workers at a time. Files inside a directory that could not be made are
// skipped, since the failure has been reported once already.
func (cp *copier) run(ctx context.Context) {
	cp.dirFailed = make([]bool, len(cp.dirs))
	for i, d := range cp.dirs {
		if p := cp.dirParent[i]; p >= 0 && cp.dirFailed[p] {
			cp.dirFailed[i] = true
			continue
		}
		if err := cp.mkdir(ctx, d); err != nil {
			cp.fail(d.String(), err)
			cp.dirFailed[i] = true
		}
	}
	var total int64
	for _, j := range cp.jobs {
		total += j.size
	}
	pb := cp.st.progress(total, "cp")
	jobs := make(chan *copyJob)
	var wg sync.WaitGroup
	for range min(cp.workers, len(cp.jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				cp.copy(ctx, j, pb)
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

// copy runs one job, reporting its failure.
func (cp *copier) copy(ctx context.Context, j *copyJob, pb *progress) {
	c := cp.c
	switch {
	case j.link != "":
		if _, err := c.PutLink(ctx, j.link, j.dst.name); err != nil {
			cp.fail(j.dst.String(), err)
		}
	case !j.src.spin: // Local to spin.
		f, err := os.Open(j.src.local)
		if err != nil {
			cp.fail(j.src.local, err)
			return
		}
		defer f.Close()
		if _, err := c.Put(ctx, j.dst.name, pb.reader(f), cp.packing, nil); err != nil && !cp.st.warned(err) {
			cp.fail(j.dst.String(), err)
		}
	case !j.dst.spin: // Spin to local.
		f, err := c.Open(ctx, j.src.name)
		if err != nil {
			cp.fail(j.src.String(), err)
			return
		}
		defer f.Close()
		err = writeLocal(j.dst.local, func(w io.Writer) error {
			_, err := copyData(pb.writer(w), f)
			return err
		})
		if err != nil {
			var le *localError
			if errors.As(err, &le) {
				cp.fail(j.dst.local, le.err)
			} else {
				cp.fail(j.src.String(), err)
			}
		}
	default: // Spin to spin.
		f, err := c.Open(ctx, j.src.name)
		if err != nil {
			cp.fail(j.src.String(), err)
			return
		}
		defer f.Close()
		if _, err := c.Put(ctx, j.dst.name, pb.reader(f), cp.packing, nil); err != nil && !cp.st.warned(err) {
			cp.fail(j.dst.String(), err)
		}
	}
}
