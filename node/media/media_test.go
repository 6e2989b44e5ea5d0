package media

import "testing"

func TestType(t *testing.T) {
	for name, want := range map[string]string{
		"a/b/Holiday.JPG": "image/jpeg",
		"film.mp4":        "video/mp4",
		"notes.txt":       "text/plain; charset=utf-8",
		"song.flac":       "audio/flac",
		"noext":           "",
	} {
		if got := Type(name); got != want {
			t.Errorf("Type(%q) = %q, want %q", name, got, want)
		}
	}
}
