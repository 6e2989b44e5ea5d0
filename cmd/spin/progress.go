package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressMin is the smallest transfer that gets a progress bar.
const progressMin = 8 << 20

// A progress counts bytes moved on a bar drawn on stderr. A nil *progress
// does nothing, so callers need not check whether a bar is shown.
type progress struct {
	bar *progressbar.ProgressBar
}

// progress returns a bar for a transfer of size bytes described by desc,
// or nil when the transfer is small, its size unknown (negative), or stderr
// is not a terminal.
func (st *State) progress(size int64, desc string) *progress {
	if size < progressMin || !st.terminal(st.Stderr) {
		return nil
	}
	w := st.Stderr
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(escapeLine(desc)),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return &progress{bar: bar}
}

// add counts n more bytes. It is safe for concurrent use.
func (p *progress) add(n int) {
	if p != nil && n > 0 {
		p.bar.Add64(int64(n))
	}
}

// done finishes the bar: filled if the transfer succeeded, left as it is
// otherwise.
func (p *progress) done(ok bool) {
	if p == nil {
		return
	}
	if ok {
		p.bar.Finish()
	} else {
		p.bar.Exit()
	}
}

// reader returns r counting on the bar, or r itself if there is no bar.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &progressReader{r: r, p: p}
}

// writer returns w counting on the bar, or w itself if there is no bar.
func (p *progress) writer(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return &progressWriter{w: w, p: p}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(n)
	return n, err
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (w *progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.p.add(n)
	return n, err
}
