package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"spindle.dev"
)

const getUsage = `Usage:
    spin get [-at WHEN] PATH [DEST]

Reads the spin file PATH, following links, and writes it to the local file
DEST, or to stdout if DEST is missing or -. DEST is written in full before
it replaces any file of that name; if DEST is a directory the file is
written into it. Binary data is not written to a terminal.

Options:
    -at WHEN    read PATH as it was at WHEN: a sequence number, a
                negative number for entries back, a time
                (2026-12-04T15:04:05Z) or a date (2026-12-04, the
                end of that day, UTC); see spin history. In another
                user's tree, the Access files of then and of now
                must both let you read it
    -h, -help   print this text

Example:
    $ spin get bob@example.com/pub/plans.txt
    Meet at noon.
    $ spin get @/docs/report.pdf report.pdf
`

func runGet(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	at := atFlag(flags)
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() < 1 || flags.NArg() > 2 {
		return usagef("want PATH and optionally DEST, %s", gotArgs(flags.NArg()))
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	if c, err = st.pastClient(ctx, c, *at); err != nil {
		return err
	}
	name, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	dest := flags.Arg(1)
	if dest == "" || dest == "-" {
		return st.getStdout(ctx, c, name)
	}
	if info, err := os.Stat(dest); err == nil && info.IsDir() {
		dest = filepath.Join(dest, base(name))
	}
	return st.getFile(ctx, c, name, dest, true)
}

// getStdout writes the file name to stdout, refusing binary data when
// stdout is a terminal.
func (st *State) getStdout(ctx context.Context, c spindle.Client, name spindle.PathName) error {
	f, err := c.Open(ctx, name)
	if err != nil {
		st.fail(string(name), err)
		if errors.Is(err, spindle.IsDir) {
			st.hint("to list it, use: spin ls %s; to copy it, use: spin cp -R %s DIR", name, name)
		}
		return errFailed
	}
	defer f.Close()
	var w io.Writer = st.Stdout
	out, _ := st.Stdout.(*os.File)
	if st.terminal(st.Stdout) {
		w = &textOnly{w: w}
	} else if out != nil && f.Entry() != nil && f.Entry().Size >= pipeSize {
		growPipe(out)
	}
	if out != nil && w == st.Stdout && f.Entry() != nil && f.Entry().Size >= directMin && freshFile(out) {
		// "spin get PATH > FILE": as fast as spin get PATH FILE.
		if done, err := copyDirect(out, f, f.Entry().Size, func(int) {}); done {
			if err == nil {
				_, err = out.Seek(f.Entry().Size, io.SeekStart) // For whatever writes to stdout next.
			}
			if err != nil {
				return st.fail(string(name), err)
			}
			return nil
		}
	}
	_, err = copyData(w, f)
	if t, ok := w.(*textOnly); ok && err == nil && len(t.tail) > 0 {
		err = errBinary // The file ends inside a rune.
	}
	if errors.Is(err, errBinary) {
		st.errorf("%s: refusing to write binary data to a terminal", name)
		st.hint("give a file to write to: spin get %s FILE", name)
		return errFailed
	}
	if err != nil {
		return st.fail(string(name), err)
	}
	return nil
}

// getFile writes the spin file name to the local file dest, through a
// temporary file in the same directory that is renamed into place only
// when every byte has been read and verified. With bar set, a large file
// gets a progress bar.
func (st *State) getFile(ctx context.Context, c spindle.Client, name spindle.PathName, dest string, bar bool) error {
	f, err := c.Open(ctx, name)
	if err != nil {
		st.fail(string(name), err)
		if errors.Is(err, spindle.IsDir) {
			st.hint("to copy a directory, use: spin cp -R %s %s", name, dest)
		}
		return errFailed
	}
	defer f.Close()
	if e := f.Entry(); e != nil && e.Attr.IsDir() {
		st.errorf("%s: is a directory", name)
		st.hint("to copy a directory, use: spin cp -R %s %s", name, dest)
		return errFailed
	}
	var pb *progress
	if bar {
		if e := f.Entry(); e != nil {
			pb = st.progress(e.Size, fmt.Sprintf("get %s", base(name)))
		}
	}
	err = writeLocal(dest, func(w io.Writer) error {
		if lw, ok := w.(*localWriter); ok {
			if out, ok := lw.w.(*os.File); ok && f.Entry() != nil && f.Entry().Size >= directMin {
				if done, err := copyDirect(out, f, f.Entry().Size, pb.add); done {
					return err
				}
			}
		}
		_, err := copyData(pb.writer(w), f)
		return err
	})
	pb.done(err == nil)
	if err != nil {
		var le *localError
		if errors.As(err, &le) {
			return st.fail(dest, le.err)
		}
		return st.fail(string(name), err)
	}
	return nil
}

// A localError is a failure to write a local file, as opposed to a failure
// to read from spin.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// writeLocal creates or replaces the local file dest with what fill
// writes, going through a temporary file in dest's directory so that dest
// is never seen half written. An existing dest keeps its permissions; a new
// one gets mode 0644. Failures of the local file system are *localError.
func writeLocal(dest string, fill func(w io.Writer) error) error {
	dir, file := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+file+".spin-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &localError{&os.PathError{Op: "create", Path: dest, Err: err}}
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	mode := os.FileMode(0o644)
	if info, err := os.Stat(dest); err == nil {
		if info.IsDir() {
			return &localError{&os.PathError{Op: "write", Path: dest, Err: errors.New("is a directory")}}
		}
		mode = info.Mode().Perm()
	}
	bw := &localWriter{w: tmp}
	if err := fill(bw); err != nil {
		if bw.err != nil {
			return &localError{&os.PathError{Op: "write", Path: dest, Err: bw.err}}
		}
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return &localError{err}
	}
	if err := tmp.Close(); err != nil {
		return &localError{&os.PathError{Op: "write", Path: dest, Err: err}}
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return &localError{err}
	}
	ok = true
	return nil
}

// A localWriter remembers its writer's error, to tell a full disk from a
// failed read.
type localWriter struct {
	w   io.Writer
	err error
}

func (w *localWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil {
		w.err = err
	}
	return n, err
}

// errBinary is returned by a textOnly writer given binary data.
var errBinary = errors.New("binary data")

// textOnly passes UTF-8 text without NUL bytes through to w and fails with
// errBinary, writing nothing of that chunk, at the first chunk that is not
// text. A rune split between two writes is carried over.
type textOnly struct {
	w    io.Writer
	tail []byte // An incomplete rune at the end of the last write.
}

func (t *textOnly) Write(b []byte) (int, error) {
	data := append(t.tail, b...)
	// Hold back an incomplete rune at the end: at most 3 bytes.
	keep := 0
	for i := len(data) - 1; i >= 0 && i >= len(data)-3; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				keep = len(data) - i
			}
			break
		}
	}
	text := data[:len(data)-keep]
	if !utf8.Valid(text) || bytes.IndexByte(text, 0) >= 0 {
		return 0, errBinary
	}
	if _, err := t.w.Write(text); err != nil {
		return 0, err
	}
	t.tail = append(t.tail[:0:0], data[len(data)-keep:]...)
	return len(b), nil
}

// pipeSize is the buffer get asks for when it writes a file of at least
// that size to a pipe: the largest an unprivileged process may set on
// Linux by default (/proc/sys/fs/pipe-max-size).
const pipeSize = 1 << 20

// copyBufSize is the buffer copyData reads through: large enough that
// copying a big file costs few system calls.
const copyBufSize = 256 << 10

// copyData copies src to dst through a buffer of copyBufSize bytes, unless
// one of them can do better (io.WriterTo, io.ReaderFrom).
func copyData(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(dst, src, make([]byte, copyBufSize))
}

// freshFile reports whether f is an empty regular file opened at its
// start, such as a shell's "> FILE" makes, which get may write with
// O_DIRECT through a second descriptor.
func freshFile(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return false
	}
	off, err := f.Seek(0, io.SeekCurrent)
	return err == nil && off == 0
}
