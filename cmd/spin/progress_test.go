package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

const mib = 1 << 20

// A transfer's first moments show no rate, however many bytes they
// counted (the first tick of a copy of 2,000 files once showed
// "212 GiB/s"), and then the rate over the last few seconds.
func TestMeterRate(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	m := meter{total: 2000 * mib, filesTotal: 2000}
	m.begin(t0)
	// 48 MiB of buffers filled in the first 10 ms.
	m.sample(at(10*time.Millisecond), 48*mib, 0, 0)
	if r, _, ok := m.rate(at(10 * time.Millisecond)); ok {
		t.Fatalf("rate after 10ms: %v B/s, want none", r)
	}
	if got, want := m.line(at(10*time.Millisecond)), "0/2000 files, 48.0 MiB of 2.0 GiB (2%)"; got != want {
		t.Errorf("line after 10ms:\n got %q\nwant %q", got, want)
	}
	m.sample(at(500*time.Millisecond), 50*mib, 3, 0)
	if _, _, ok := m.rate(at(500 * time.Millisecond)); ok {
		t.Fatal("a rate after 500ms")
	}
	// Then 10 MiB/s, sampled every 250 ms, for 20 s.
	var now time.Time
	for i := 1; i <= 80; i++ {
		now = at(time.Second + time.Duration(i)*250*time.Millisecond)
		m.sample(now, 50*mib+int64(i)*10*mib/4, 3+10*i, 0)
	}
	r, _, ok := m.rate(now)
	if !ok || r < 9.99*mib || r > 10.01*mib {
		t.Fatalf("steady rate: %.0f B/s (%v), want 10 MiB/s", r, ok)
	}
	if len(m.samples) > int(rateWindow/(250*time.Millisecond))+2 {
		t.Errorf("%d samples kept, want about %d", len(m.samples), rateWindow/(250*time.Millisecond))
	}
	if got, want := m.line(now), "803/2000 files, 250.0 MiB of 2.0 GiB (12%), 10.0 MiB/s, 2m55s left"; got != want {
		t.Errorf("steady line:\n got %q\nwant %q", got, want)
	}
	// A stall: nothing moves for 6 s, and the rate falls to 0.
	for i := 1; i <= 24; i++ {
		now = now.Add(250 * time.Millisecond)
		m.sample(now, 250*mib, 803, 0)
	}
	if r, _, ok := m.rate(now); !ok || r != 0 {
		t.Errorf("rate after a 6 s stall: %v (%v), want 0", r, ok)
	}
	if got, want := m.line(now), "803/2000 files, 250.0 MiB of 2.0 GiB (12%), 0 B/s"; got != want {
		t.Errorf("stalled line:\n got %q\nwant %q", got, want)
	}
}

// Files found already copied count as done, and their bytes come off the
// total rather than counting as moved.
func TestMeterSkipped(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	m := meter{total: 100 * mib, filesTotal: 10}
	m.begin(t0)
	m.sample(t0.Add(2*time.Second), 10*mib, 8, 80*mib)
	if got, want := m.line(t0.Add(2*time.Second)), "8/10 files, 10.0 MiB of 20.0 MiB (50%), 5.0 MiB/s, 2s left"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	// Small files: the files left, not the few bytes left, say how long.
	small := meter{total: 100 << 10, filesTotal: 6000}
	small.begin(t0)
	small.sample(t0.Add(2*time.Second), 50<<10, 1000, 0)
	if got, want := small.line(t0.Add(2*time.Second)), "1000/6000 files, 50.0 KiB of 100.0 KiB (50%), 25.0 KiB/s, 10s left"; got != want {
		t.Errorf("small files: got %q\nwant %q", got, want)
	}
	one := meter{total: 3 * mib}
	one.begin(t0)
	one.sample(t0.Add(time.Second), mib, 0, 0)
	if got, want := one.line(t0.Add(time.Second)), "1.0 MiB of 3.0 MiB (33%), 1.0 MiB/s, 2s left"; got != want {
		t.Errorf("one file: got %q\nwant %q", got, want)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		1024*1024 - 1: "1.0 MiB", 34 * mib: "34.0 MiB", 1288490189: "1.2 GiB",
		212 << 30: "212.0 GiB", 3 << 40: "3.0 TiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		0: "0s", 1400 * time.Millisecond: "1s", 59 * time.Second: "59s", 98 * time.Second: "1m38s",
		2*time.Hour + 5*time.Minute + 30*time.Second: "2h05m",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// cp of many small files gets a line even though their bytes are few;
// one small file, or output that is not a terminal, gets none. The line
// ends with a newline, so that what follows starts a line of its own.
func TestProgressShown(t *testing.T) {
	var buf bytes.Buffer
	st := &State{Stderr: &buf, isTerminal: func(io.Writer) bool { return true }}
	if p := st.progressFiles(100*4096, progressMinFiles, "cp"); p == nil {
		t.Error("no progress line for many small files")
	} else {
		p.add(4096)
		p.fileDone()
		p.done(true)
	}
	if got := buf.String(); !strings.HasPrefix(got, "\rcp: 1/100 files, 4.0 KiB of 400.0 KiB (1%)") || !strings.HasSuffix(got, "\n") {
		t.Errorf("progress line %q", got)
	}
	if p := st.progress(4096, "put f"); p != nil {
		t.Error("a progress line for one small file")
	}
	st.isTerminal = func(io.Writer) bool { return false }
	if p := st.progressFiles(1<<30, 1000, "cp"); p != nil {
		t.Error("a progress line on a stream that is not a terminal")
	}
}

// Lines printed while the progress line is shown replace it, and it is
// drawn again below them.
func TestProgressAbove(t *testing.T) {
	var buf bytes.Buffer
	st := &State{Stderr: &buf, isTerminal: func(io.Writer) bool { return true }}
	p := st.progressFiles(1<<30, 1000, "cp")
	p.draw(time.Now())
	drawn := buf.String()
	p.above(func() { buf.WriteString("spin: cp: f: I/O error\n") })
	p.done(false)
	want := drawn + "\r" + strings.Repeat(" ", len(drawn)-1) + "\rspin: cp: f: I/O error\n\rcp: 0/1000 files, 0 B of 1.0 GiB (0%)\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}
