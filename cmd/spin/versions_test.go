package main

import (
	"testing"
	"time"
)

// WHEN is a sequence number, a count back, a time or a date (the end of
// that day, UTC); anything else is a usage error.
func TestParseWhen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		seq  int64
		when time.Time
	}{
		{"7", 7, time.Time{}},
		{"-51", -51, time.Time{}},
		{"2026-12-04T15:04:05Z", 0, time.Date(2026, 12, 4, 15, 4, 5, 0, time.UTC)},
		{"2026-12-04", 0, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond)},
	} {
		seq, when, err := parseWhen(tc.in)
		if err != nil || seq != tc.seq || !when.Equal(tc.when) {
			t.Errorf("parseWhen(%q) = %d, %v, %v; want %d, %v", tc.in, seq, when, err, tc.seq, tc.when)
		}
	}
	for _, bad := range []string{"", "0", "yesterday", "2026-13-01", "12/04/2026"} {
		if _, _, err := parseWhen(bad); err == nil {
			t.Errorf("parseWhen(%q): no error", bad)
		}
	}
}
