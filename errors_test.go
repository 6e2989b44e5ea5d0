package spindle_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"

	"spindle.dev"
)

const (
	op   = spindle.Op("test.Op")
	path = spindle.PathName("ann@example.com/dir/file")
	user = spindle.UserName("bob@example.com")
)

func TestErrorString(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{spindle.E(op, spindle.Permission, path, user, "no way"), "test.Op: ann@example.com/dir/file, user bob@example.com: permission denied: no way"},
		{spindle.E(op, spindle.Permission, path, user), "test.Op: ann@example.com/dir/file, user bob@example.com: permission denied"},
		{spindle.E(op, path), "test.Op: ann@example.com/dir/file"},
		{spindle.E(user, "x"), "user bob@example.com: x"},
		{spindle.E(op, user, io.EOF), "test.Op: user bob@example.com: EOF"},
		{spindle.E(spindle.NotExist), "does not exist"},
		{spindle.E(spindle.Other), "no error"},
		{spindle.E(op, nil), "test.Op"},
		// An outer error takes the inner one's kind, path and user, which are then printed once.
		{spindle.E(op, spindle.E(spindle.Op("inner.Op"), spindle.NotExist, path, user, "gone")),
			"test.Op: ann@example.com/dir/file, user bob@example.com: does not exist: inner.Op: gone"},
		// An inner error with nothing left but its cause collapses into it.
		{spindle.E(op, spindle.E(spindle.IO, path, "disk")), "test.Op: ann@example.com/dir/file: I/O error: disk"},
		// Different kinds, paths and users are all kept.
		{spindle.E(op, spindle.Permission, spindle.PathName("a@b.co/x"), spindle.E(spindle.Op("in"), spindle.NotExist, path, user)),
			"test.Op: a@b.co/x, user bob@example.com: permission denied: in: ann@example.com/dir/file: does not exist"},
		{spindle.E(op, spindle.IO, spindle.E(spindle.Op("in"), spindle.IO, "x")), "test.Op: I/O error: in: x"},
	}
	for i, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%d: got  %q\nwant %q", i, got, tc.want)
		}
	}
}

func TestEDoesNotChangeItsArguments(t *testing.T) {
	inner := spindle.E(spindle.Op("in"), spindle.NotExist, path, user, "gone").(*spindle.Error)
	before := *inner
	_ = spindle.E(op, inner)
	if *inner != before {
		t.Errorf("E changed its argument: %+v, was %+v", *inner, before)
	}
}

// E never panics: a call with no arguments, or with one of a type E does
// not know, gives an Internal error that names the mistake and keeps what
// the other arguments said.
func TestENeverPanics(t *testing.T) {
	cause := errors.New("disk on fire")
	tests := []struct {
		args []any
		want string
	}{
		{nil, "internal error: spindle.E called with no arguments"},
		{[]any{42}, "internal error: spindle.E: bad argument of type int: 42"},
		{[]any{op, []byte("x")}, "test.Op: internal error: spindle.E: bad argument of type []uint8: [120]"},
		{[]any{op, spindle.IO, path, 3.5, cause},
			"test.Op: ann@example.com/dir/file: internal error: spindle.E: bad argument of type float64: 3.5; error: disk on fire"},
		{[]any{op, spindle.NotExist, 1, true},
			"test.Op: internal error: spindle.E: bad argument of type int: 1, of type bool: true; kind: does not exist"},
	}
	for _, tc := range tests {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("E(%v) panicked: %v", tc.args, r)
				}
			}()
			err = spindle.E(tc.args...)
		}()
		if err == nil {
			continue
		}
		if !errors.Is(err, spindle.Internal) {
			t.Errorf("E(%v) = %v, not Internal", tc.args, err)
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("E(%v):\ngot  %q\nwant %q", tc.args, got, tc.want)
		}
	}
	if err := spindle.E(op, 3.5, cause); !errors.Is(err, cause) {
		t.Errorf("E with a bad argument lost the underlying error: %v", err)
	}
}

func TestETypedNilError(t *testing.T) {
	var inner *spindle.Error // A nil *Error held in an error, the classic Go trap.
	err := spindle.E(op, spindle.IO, inner)
	if err.Error() != "test.Op: I/O error" {
		t.Errorf("E with a nil *Error = %q", err)
	}
}

func TestIs(t *testing.T) {
	err := spindle.E(op, spindle.NotExist, path)
	if !errors.Is(err, spindle.NotExist) {
		t.Error("errors.Is(err, NotExist) = false")
	}
	if errors.Is(err, spindle.Exist) || errors.Is(err, spindle.Other) {
		t.Error("errors.Is matched the wrong kind")
	}
	wrapped := fmt.Errorf("while doing X: %w", err)
	if !errors.Is(wrapped, spindle.NotExist) {
		t.Error("errors.Is does not see through fmt.Errorf")
	}
	// The inner kind stays visible when the outer error has its own.
	both := spindle.E(op, spindle.Permission, spindle.E(spindle.Op("in"), spindle.NotExist, path))
	if !errors.Is(both, spindle.Permission) || !errors.Is(both, spindle.NotExist) {
		t.Error("errors.Is does not see both kinds")
	}
	if !errors.Is(spindle.E(op, io.EOF), io.EOF) {
		t.Error("errors.Is does not reach the underlying error")
	}
	var e *spindle.Error
	if !errors.As(wrapped, &e) || e.Path != path {
		t.Error("errors.As does not find the *Error")
	}
	if errors.Is(spindle.E(op, "x"), spindle.Other) {
		t.Error("Other matched")
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		err  error
		want spindle.Kind
	}{
		{nil, spindle.Other},
		{io.EOF, spindle.Other},
		{spindle.E(op, spindle.IO), spindle.IO},
		{spindle.Integrity, spindle.Integrity},
		{fmt.Errorf("x: %w", spindle.E(spindle.Transient)), spindle.Transient},
		{spindle.E(op, spindle.Permission, spindle.E(spindle.NotExist)), spindle.Permission},
		{&spindle.Error{Op: op, Err: &spindle.Error{Kind: spindle.Exist}}, spindle.Exist},
		{fmt.Errorf("x: %w", spindle.NotExist), spindle.NotExist},
		{spindle.E(op, fmt.Errorf("group g: %w", spindle.NotExist)), spindle.NotExist},
	}
	for i, tc := range tests {
		if got := spindle.KindOf(tc.err); got != tc.want {
			t.Errorf("%d: KindOf(%v) = %v, want %v", i, tc.err, got, tc.want)
		}
	}
}

func TestKindText(t *testing.T) {
	if got := spindle.Kind(200).Error(); got != "unknown error kind 200" {
		t.Errorf("Kind(200) = %q", got)
	}
	if spindle.Permission.String() != "permission denied" {
		t.Errorf("Permission.String() = %q", spindle.Permission.String())
	}
	// Every kind up to BrokenLink has its own text.
	seen := map[string]bool{}
	for k := spindle.Other; k <= spindle.BrokenLink; k++ {
		s := k.Error()
		if s == "" || seen[s] {
			t.Errorf("kind %d has text %q", k, s)
		}
		seen[s] = true
	}
}

func TestMatch(t *testing.T) {
	err := spindle.E(op, spindle.Permission, path, user, "no way")
	tests := []struct {
		template error
		err      error
		want     bool
	}{
		{spindle.E(spindle.Permission), err, true},
		{spindle.E(op, spindle.Permission, path, user, "no way"), err, true},
		{spindle.E(user), err, true},
		{spindle.E(spindle.NotExist), err, false},
		{spindle.E(spindle.Op("other.Op")), err, false},
		{spindle.E(spindle.PathName("a@b.co/x")), err, false},
		{spindle.E(spindle.UserName("c@b.co")), err, false},
		{spindle.E("other message"), err, false},
		{spindle.E("no way"), err, true},
		{spindle.E(spindle.Permission), spindle.E(op), false},
		{spindle.E("x"), spindle.E(op), false},
		{spindle.Permission, err, false},               // Template must be an *Error.
		{spindle.E(spindle.Permission), io.EOF, false}, // So must err.
		{spindle.E(op, spindle.E(spindle.Op("in"), "deep")), spindle.E(op, spindle.IO, spindle.E(spindle.Op("in"), "deep")), true},
		{spindle.E(op, spindle.E(spindle.Op("in"), "deep")), spindle.E(op, spindle.IO, spindle.E(spindle.Op("in"), "shallow")), false},
		{spindle.E(op, spindle.E(spindle.Op("in"), "deep")), spindle.E(op, "deep"), false},
	}
	for i, tc := range tests {
		if got := spindle.Match(tc.template, tc.err); got != tc.want {
			t.Errorf("%d: Match(%v, %v) = %v, want %v", i, tc.template, tc.err, got, tc.want)
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	errs := []*spindle.Error{
		{},
		{Op: op, Kind: spindle.Permission, Path: path, User: user, Err: errors.New("no way")},
		{Kind: spindle.BrokenLink},
		{Op: op, Err: &spindle.Error{Op: "in", Kind: spindle.Integrity, Path: "a@b.co/x", Err: &spindle.Error{Err: errors.New("deepest")}}},
		{Err: fmt.Errorf("wrapped: %w", io.EOF)},
		{Path: spindle.PathName(bytes.Repeat([]byte("x"), 300))},
	}
	for i, e := range errs {
		data, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got := spindle.UnmarshalError(data)
		g, ok := got.(*spindle.Error)
		if !ok {
			t.Fatalf("%d: UnmarshalError returned %T", i, got)
		}
		if g.Error() != e.Error() || !spindle.Match(e, g) || !spindle.Match(g, e) || spindle.KindOf(g) != spindle.KindOf(e) {
			t.Errorf("%d: round trip of %q gave %q", i, e, g)
		}
		again, _ := g.MarshalBinary()
		if !bytes.Equal(again, data) {
			t.Errorf("%d: re-encoding differs", i)
		}
	}
}

func TestUnmarshalErrorMalformed(t *testing.T) {
	good, _ := (&spindle.Error{Op: op, Kind: spindle.IO, Err: errors.New("x")}).MarshalBinary()
	nest := func(n int) []byte {
		b := []byte("SPE1")
		for range n {
			b = append(b, 0, 0, 0, 0, 2)
		}
		return append(b, 0, 0, 0, 0, 0)
	}
	tests := []struct {
		data []byte
		msg  string
	}{
		{nil, "malformed error encoding: bad magic"},
		{[]byte("SPE2"), "malformed error encoding: bad magic"},
		{[]byte("SPE1"), "malformed error encoding: bad string length"},
		{good[:len(good)-1], "malformed error encoding: bad string length"},
		{append(append([]byte{}, good...), 0), "malformed error encoding: trailing bytes"},
		{[]byte("SPE1\x00\x01\x00\x00\x07"), "malformed error encoding: bad underlying error tag"},
		{[]byte("SPE1\x00"), "malformed error encoding: short data"},
		{binary.AppendUvarint([]byte("SPE1"), 1<<62), "malformed error encoding: bad string length"},
		{nest(17), "malformed error encoding: errors nested too deeply"},
	}
	for i, tc := range tests {
		err := spindle.UnmarshalError(tc.data)
		if !spindle.Match(spindle.E(spindle.Invalid, tc.msg), err) {
			t.Errorf("%d: UnmarshalError(%q) = %v, want %q", i, tc.data, err, tc.msg)
		}
	}
	if err := spindle.UnmarshalError(nest(16)); spindle.KindOf(err) == spindle.Invalid {
		t.Errorf("16 levels of nesting rejected: %v", err)
	}
	// A kind from a newer peer keeps its message and loses its class.
	e := spindle.UnmarshalError([]byte("SPE1\x00\xc8\x00\x00\x01\x03new"))
	if !spindle.Match(&spindle.Error{Err: errors.New("new")}, e) || spindle.KindOf(e) != spindle.Other {
		t.Errorf("unknown kind decoded as %v", e)
	}
}

// FuzzUnmarshalError checks that decoding never panics, always returns an
// error, and that whatever it returns survives a second round trip intact.
func FuzzUnmarshalError(f *testing.F) {
	for _, e := range []*spindle.Error{
		{Op: op, Kind: spindle.Permission, Path: path, User: user, Err: errors.New("no way")},
		{Op: op, Err: &spindle.Error{Op: "in", Kind: spindle.Integrity, Err: &spindle.Error{Err: errors.New("deepest")}}},
		{},
	} {
		data, _ := e.MarshalBinary()
		f.Add(data)
	}
	f.Add([]byte("SPE1\x00\xc8\x00\x00\x01\x03new"))
	f.Add([]byte("SPE1\x80\x00"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := spindle.UnmarshalError(data)
		if err == nil {
			t.Fatal("UnmarshalError returned nil")
		}
		e, ok := err.(*spindle.Error)
		if !ok {
			t.Fatalf("UnmarshalError returned %T", err)
		}
		_ = e.Error()
		enc, _ := e.MarshalBinary()
		e2, ok := spindle.UnmarshalError(enc).(*spindle.Error)
		if !ok || e2.Error() != e.Error() || spindle.KindOf(e2) != spindle.KindOf(e) {
			t.Fatalf("second round trip of %q gave %v", e, e2)
		}
		enc2, _ := e2.MarshalBinary()
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %q then %q", enc, enc2)
		}
	})
}

// A kind is said once, however the errors between two of that kind wrap.
func TestErrorSaysKindOnce(t *testing.T) {
	inner := spindle.E(spindle.Op("disk.Put"), spindle.IO, "disk full")
	err := spindle.E(spindle.Op("node.Put"), spindle.IO, fmt.Errorf("block b1: %w", inner))
	const want = "node.Put: block b1: disk.Put: I/O error: disk full"
	if got := err.Error(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(err, spindle.IO) {
		t.Error("the outer error lost its kind")
	}
	// The same error after a trip over the wire, where the inner error
	// travels as text, and causes whose text says the kind already.
	data, _ := err.(*spindle.Error).MarshalBinary()
	if got := spindle.UnmarshalError(data).Error(); got != want {
		t.Errorf("over the wire: got %q, want %q", got, want)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{spindle.E(spindle.Integrity, errors.New("integrity check failed: bad hash")), "integrity check failed: bad hash"},
		{spindle.E(spindle.Integrity, errors.New("integrity check failed")), "integrity check failed"},
		{spindle.E(spindle.IO, spindle.PathName("a@b.c/f"), errors.New("read y: I/O error")), "a@b.c/f: read y: I/O error"},
		{spindle.E(spindle.IO, errors.New("I/O errors are rare")), "I/O error: I/O errors are rare"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	other := spindle.E(spindle.Op("node.Get"), spindle.Integrity, fmt.Errorf("block b2: %w", inner))
	if got, want := other.Error(), "node.Get: integrity check failed: block b2: disk.Put: I/O error: disk full"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
