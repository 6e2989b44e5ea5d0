package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"spindle.dev"
)

// progressMin is the smallest transfer that gets a progress line.
const progressMin = 8 << 20

// progressMinFiles is the smallest number of files that gets a progress
// line whatever their size: copying many small files takes a while too.
const progressMinFiles = 100

// progressTick is how often the progress line is redrawn.
const progressTick = 250 * time.Millisecond

// The transfer rate is measured over the last rateWindow, and shown only
// once rateMinAge has passed: in its first moments a transfer mostly fills
// buffers (a put reads the first blocks of every file being copied before
// any has reached the node), and bytes over a few milliseconds once showed
// "212 GiB/s".
const (
	rateWindow = 5 * time.Second
	rateMinAge = time.Second
)

// A progress counts the bytes and files of a transfer on a line redrawn on
// stderr. A nil *progress does nothing, so callers need not check whether
// a line is shown.
type progress struct {
	w     io.Writer
	desc  string
	bytes atomic.Int64
	files atomic.Int64
	skip  atomic.Int64 // Bytes of files found already copied, taken off the total.

	mu       sync.Mutex // Guards m and the drawing.
	m        meter
	width    int // Length of the line last drawn.
	stop     chan struct{}
	finished chan struct{}
}

// progress returns a progress line for a transfer of size bytes described
// by desc, or nil when the transfer is small, its size unknown (negative),
// or stderr is not a terminal.
func (st *State) progress(size int64, desc string) *progress {
	return st.progressFiles(size, 0, desc)
}

// progressFiles is progress for a transfer of files files (0 if the
// transfer is one file, whose count is not shown), which gets a line also
// when the files are many but small.
func (st *State) progressFiles(size int64, files int, desc string) *progress {
	if size < 0 || (size < progressMin && files < progressMinFiles) || !st.terminal(st.Stderr) {
		return nil
	}
	p := &progress{
		w:        st.Stderr,
		desc:     escapeLine(desc),
		m:        meter{total: size, filesTotal: files},
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	p.m.begin(time.Now())
	go p.run()
	return p
}

// run redraws the line every progressTick until done.
func (p *progress) run() {
	defer close(p.finished)
	t := time.NewTicker(progressTick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.draw(now)
		}
	}
}

// draw takes a sample of the counts at now and redraws the line.
func (p *progress) draw(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m.sample(now, p.bytes.Load(), int(p.files.Load()), p.skip.Load())
	line := p.desc + ": " + p.m.line(now)
	pad := max(p.width-len(line), 0)
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// above runs write, which writes lines to stderr, with the progress line
// cleared, so that they do not run into it; the next tick draws it again
// below them. With no progress line, it just runs write.
func (p *progress) above(write func()) {
	if p == nil {
		write()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
	write()
}

// add counts n more bytes. It is safe for concurrent use.
func (p *progress) add(n int) {
	if p != nil && n > 0 {
		p.bytes.Add(int64(n))
	}
}

// fileDone counts one more file transferred. It is safe for concurrent use.
func (p *progress) fileDone() {
	if p != nil {
		p.files.Add(1)
	}
}

// fileSkipped counts one more file that needed no transfer, size bytes
// long: it is done, and its bytes are taken off the total, so that the
// rate and the time left count only bytes that move. It is safe for
// concurrent use.
func (p *progress) fileSkipped(size int64) {
	if p != nil {
		p.files.Add(1)
		p.skip.Add(size)
	}
}

// done stops the line after drawing it a last time and ending it, so that
// what is printed next starts on a line of its own. Whether the transfer
// succeeded (ok) or not, the line shows how far it got.
func (p *progress) done(ok bool) {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.finished
	p.draw(time.Now())
	fmt.Fprintln(p.w)
}

// reader returns r counting on the line, or r itself if there is none.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &progressReader{r: r, p: p}
}

// writer returns w counting on the line, or w itself if there is none.
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

// A meter holds the counts of a transfer as sampled over time, and says
// them in words. It knows no clock: the caller passes the time, so that
// tests can.
type meter struct {
	total      int64 // Bytes to transfer, before skipped files are taken off.
	filesTotal int   // Files to transfer; 0 for a single file, not counted.
	bytes      int64
	files      int
	skipped    int64
	start      time.Time
	samples    []rateSample // Oldest first; the first is at most rateWindow before the last.
}

type rateSample struct {
	t     time.Time
	bytes int64
	files int
}

// begin starts the meter at now with nothing transferred.
func (m *meter) begin(now time.Time) {
	m.start = now
	m.samples = append(m.samples[:0], rateSample{now, 0, 0})
}

// sample records the counts at now. Samples older than needed to measure
// over rateWindow are dropped.
func (m *meter) sample(now time.Time, bytes int64, files int, skipped int64) {
	m.bytes, m.files, m.skipped = bytes, files, skipped
	m.samples = append(m.samples, rateSample{now, bytes, files})
	// Keep the newest sample at least rateWindow old, and none before it.
	i := 0
	for i+1 < len(m.samples) && now.Sub(m.samples[i+1].t) >= rateWindow {
		i++
	}
	m.samples = m.samples[i:]
}

// rate returns the bytes and files per second over the last rateWindow,
// and false until the transfer has run for rateMinAge.
func (m *meter) rate(now time.Time) (bytes, files float64, ok bool) {
	if len(m.samples) == 0 || now.Sub(m.start) < rateMinAge {
		return 0, 0, false
	}
	first := m.samples[0]
	d := now.Sub(first.t).Seconds()
	if d < rateMinAge.Seconds() {
		return 0, 0, false
	}
	return float64(m.bytes-first.bytes) / d, float64(m.files-first.files) / d, true
}

// left estimates the time the transfer still takes, from the bytes and
// (for many files) the files still to go, whichever takes longer: a tree
// of small files is bound by the files, not by their few bytes. It
// reports false when there is no estimate.
func (m *meter) left(now time.Time) (time.Duration, bool) {
	byteRate, fileRate, ok := m.rate(now)
	if !ok {
		return 0, false
	}
	var secs float64
	if left := m.total - m.skipped - m.bytes; left > 0 {
		if byteRate < 1 {
			return 0, false
		}
		secs = float64(left) / byteRate
	}
	if left := m.filesTotal - m.files; m.filesTotal > 0 && left > 0 {
		if fileRate <= 0 {
			return 0, false
		}
		secs = max(secs, float64(left)/fileRate)
	}
	if secs == 0 {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// line says where the transfer stands at now, as
//
//	120/2000 files, 34.0 MiB of 1.2 GiB (2%), 12.0 MiB/s, 1m38s left
//
// leaving out the files for a single file, and the rate and time left
// until there is a rate worth showing.
func (m *meter) line(now time.Time) string {
	var parts []string
	if m.filesTotal > 0 {
		parts = append(parts, fmt.Sprintf("%d/%d files", m.files, m.filesTotal))
	}
	total := m.total - m.skipped
	if total > 0 {
		pct := min(100*m.bytes/total, 100)
		parts = append(parts, fmt.Sprintf("%s of %s (%d%%)", formatBytes(m.bytes), formatBytes(total), pct))
	} else {
		parts = append(parts, formatBytes(m.bytes))
	}
	if r, _, ok := m.rate(now); ok {
		parts = append(parts, formatBytes(int64(r))+"/s")
	}
	if d, ok := m.left(now); ok {
		parts = append(parts, formatDuration(d)+" left")
	}
	return strings.Join(parts, ", ")
}

// formatBytes says n bytes in IEC units with one decimal: 512 B,
// 34.0 MiB, 1.2 GiB.
func formatBytes(n int64) string { return spindle.FormatBytes(n) }

// formatDuration says d to the second, as 45s, 1m38s or 2h05m.
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
	}
}
