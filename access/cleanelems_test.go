package access

import "testing"

func TestCleanElems(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"", true},
		{"a", true},
		{"a/b/c", true},
		{".a/a./..b/b../...", true},
		{"a/.hidden", true},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"..", false},
		{"./a", false},
		{"../a", false},
		{"a/.", false},
		{"a/..", false},
		{"a/./b", false},
		{"a/../b", false},
	}
	for _, tc := range tests {
		if got := cleanElems(tc.s); got != tc.want {
			t.Errorf("cleanElems(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
