package spindle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Op names the operation that failed, conventionally "package.Method",
// as in "dirlog.Append" or "blocks.Put".
type Op string

// Kind classifies an error. Kinds travel between peers (see
// [Error.MarshalBinary]), so the list is append-only: never renumber.
//
// Kind implements error, so that callers can write
//
//	if errors.Is(err, spindle.NotExist) { … }
//
// exactly as they would with fs.ErrNotExist.
type Kind uint8

// The kinds of error. Their numbers are part of the wire format.
const (
	Other         Kind = iota // Unclassified error. Never printed.
	Invalid                   // Invalid operation or argument: bad name, malformed file.
	Permission                // The user lacks the right for this operation.
	Private                   // The item may or may not exist: the user may not know.
	NotExist                  // The item does not exist.
	Exist                     // The item already exists.
	IO                        // Disk or network I/O failed.
	Transient                 // A temporary failure; the operation may be retried.
	Internal                  // An internal error or inconsistency: a bug.
	CannotDecrypt             // No wrapped key for this reader, or the key does not fit.
	Integrity                 // A hash or signature check failed. Never retried.
	IsDir                     // The item is a directory.
	NotDir                    // The item is not a directory.
	NotEmpty                  // The directory is not empty.
	BrokenLink                // A link could not be followed.
	Damaged                   // Stored state on the answering host is damaged; its operator must repair it.
	Full                      // The answering node holds all it agreed to hold: ask another.
	Stale                     // Made under a state that has changed since (an Access or Group file): work it out again.
	kindEnd
)

var kindText = [...]string{
	Other:         "other error",
	Invalid:       "invalid operation",
	Permission:    "permission denied",
	Private:       "private",
	NotExist:      "does not exist",
	Exist:         "already exists",
	IO:            "I/O error",
	Transient:     "temporary failure",
	Internal:      "internal error",
	CannotDecrypt: "cannot decrypt",
	Integrity:     "integrity check failed",
	IsDir:         "is a directory",
	NotDir:        "not a directory",
	NotEmpty:      "directory not empty",
	BrokenLink:    "broken link",
	Damaged:       "damaged on this host",
	Full:          "storage limit reached",
	Stale:         "made under a state that has changed",
}

// Error returns the kind's description, such as "permission denied".
func (k Kind) Error() string {
	if k < kindEnd {
		return kindText[k]
	}
	return fmt.Sprintf("unknown error kind %d", uint8(k))
}

// String is the same as Error.
func (k Kind) String() string { return k.Error() }

// Error is the error type used throughout Spindle. Any of its fields may be
// empty. The zero value is not useful; build errors with [E].
type Error struct {
	Op   Op
	Kind Kind
	Path PathName
	User UserName
	Err  error // The underlying error, if any.
}

// E builds an *Error from its arguments, whose meaning is decided by their
// type alone, never by their content:
//
//	Op        the operation
//	Kind      the class of error
//	PathName  the path name involved
//	UserName  the user involved
//	string    a message, which becomes the underlying error
//	error     the underlying error
//
// If the kind is not given (or is Other) and the underlying error is an
// *Error, the kind is taken from it; likewise an empty path or user is taken
// from an underlying *Error, which then drops it so that it is printed once.
//
// E never panics. Given no arguments, or an argument of another type,
// which is always a programming mistake, it records the mistake in the
// error it returns: the kind is then Internal, and the underlying error
// names the bad argument's type and value (and wraps the underlying
// error the other arguments gave, if any).
func E(args ...any) error {
	if len(args) == 0 {
		return &Error{Kind: Internal, Err: errors.New("spindle.E called with no arguments")}
	}
	e := &Error{}
	var bad []any // Arguments of unexpected types.
	for _, a := range args {
		switch a := a.(type) {
		case Op:
			e.Op = a
		case Kind:
			e.Kind = a
		case PathName:
			e.Path = a
		case UserName:
			e.User = a
		case string:
			e.Err = errors.New(a)
		case *Error:
			if a == nil {
				continue // A nil *Error is no error, as an untyped nil is.
			}
			cp := *a // Copy so the caller's error is not changed.
			e.Err = &cp
		case error:
			e.Err = a
		case nil:
			// An untyped nil error: ignore, so E(op, err) with err == nil
			// still builds a sensible error.
		default:
			bad = append(bad, a)
		}
	}
	if len(bad) > 0 {
		return badArgs(e, bad)
	}
	inner, ok := e.Err.(*Error)
	if !ok {
		return e
	}
	if inner.Path == e.Path {
		inner.Path = ""
	}
	if e.Path == "" {
		e.Path, inner.Path = inner.Path, ""
	}
	if inner.User == e.User {
		inner.User = ""
	}
	if e.User == "" {
		e.User, inner.User = inner.User, ""
	}
	if e.Kind == Other {
		e.Kind, inner.Kind = inner.Kind, Other
	} else if inner.Kind == e.Kind {
		inner.Kind = Other
	}
	if inner.Op == "" && inner.Path == "" && inner.User == "" && inner.Kind == Other {
		e.Err = inner.Err // Nothing left of the inner *Error but its cause.
	}
	return e
}

// badArgs returns e, built from E's good arguments, as an Internal error
// that names the arguments of unexpected types and wraps e's underlying
// error.
func badArgs(e *Error, bad []any) *Error {
	var b strings.Builder
	b.WriteString("spindle.E: bad argument")
	for i, a := range bad {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " of type %T: %v", a, a)
	}
	msg := b.String()
	switch {
	case e.Err != nil:
		e.Err = fmt.Errorf("%s; error: %w", msg, e.Err)
	case e.Kind != Other:
		e.Err = fmt.Errorf("%s; kind: %v", msg, e.Kind)
	default:
		e.Err = errors.New(msg)
	}
	e.Kind = Internal
	return e
}

// Error prints the error as
//
//	op: path, user user: kind: underlying error
//
// leaving out the parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	sep := func() {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
	}
	if e.Op != "" {
		b.WriteString(string(e.Op))
	}
	if e.Path != "" {
		sep()
		b.WriteString(string(e.Path))
	}
	if e.User != "" {
		if e.Path != "" {
			b.WriteString(", user ")
		} else {
			sep()
			b.WriteString("user ")
		}
		b.WriteString(string(e.User))
	}
	if e.Kind != Other && !kindBelow(e.Err, e.Kind) {
		sep()
		b.WriteString(e.Kind.Error())
	}
	if e.Err != nil {
		sep()
		b.WriteString(e.Err.Error())
	}
	if b.Len() == 0 {
		return "no error"
	}
	return b.String()
}

// kindBelow reports whether err already says kind k, so that e.Error
// does not say it twice ("I/O error: block x: I/O error: ..."): an *Error
// in err's chain is of kind k, or the first error in it that is not an
// *Error says k in its text. That error's text holds everything below it,
// such as an *Error wrapped with fmt.Errorf's %w, or one that came over
// the wire as its message.
func kindBelow(err error, k Kind) bool {
	for err != nil {
		e, ok := err.(*Error)
		if !ok {
			return SaysKind(err.Error(), k)
		}
		if e.Kind == k {
			return true
		}
		err = e.Err
	}
	return false
}

// SaysKind reports whether msg, an error's text, says kind k as one of its
// colon-separated parts ("integrity check failed: bad hash", "block x: I/O
// error: disk full"), as an error of kind k printed within it would.
func SaysKind(msg string, k Kind) bool {
	t := k.Error()
	return msg == t || strings.HasPrefix(msg, t+": ") || strings.HasSuffix(msg, ": "+t) || strings.Contains(msg, ": "+t+": ")
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e is of the Kind target, so that
// errors.Is(err, spindle.NotExist) works.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && e.Kind == k && k != Other
}

// KindOf returns the Kind of err: the first Kind found in its chain, or Other.
func KindOf(err error) Kind {
	var e *Error
	for err != nil {
		if errors.As(err, &e) {
			if e.Kind != Other {
				return e.Kind
			}
			err = e.Err
			continue
		}
		var k Kind
		if errors.As(err, &k) { // A bare Kind, perhaps wrapped by fmt.Errorf.
			return k
		}
		return Other
	}
	return Other
}

// Match compares err with template, which must be an *Error, and reports
// whether every field that is set in template is equal in err. An
// underlying error in template is compared by its message, recursively if
// both are *Error. Match is meant for tests.
func Match(template, err error) bool {
	t, ok := template.(*Error)
	if !ok {
		return false
	}
	e, ok := err.(*Error)
	if !ok {
		return false
	}
	if t.Op != "" && t.Op != e.Op {
		return false
	}
	if t.Kind != Other && t.Kind != e.Kind {
		return false
	}
	if t.Path != "" && t.Path != e.Path {
		return false
	}
	if t.User != "" && t.User != e.User {
		return false
	}
	if t.Err != nil {
		if _, ok := t.Err.(*Error); ok {
			return Match(t.Err, e.Err)
		}
		if e.Err == nil || t.Err.Error() != e.Err.Error() {
			return false
		}
	}
	return true
}

// errorMagic starts an encoded *Error.
const errorMagic = "SPE1"

// MarshalBinary encodes the error for travel to another peer. Underlying
// errors that are not *Error are sent as their messages.
func (e *Error) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(errorMagic)
	e.marshal(&b, 0)
	return b.Bytes(), nil
}

// marshal encodes e; below maxErrorDepth, nested errors travel as their
// messages, so that every encoding decodes.
func (e *Error) marshal(b *bytes.Buffer, depth int) {
	putString := func(s string) {
		b.Write(binary.AppendUvarint(nil, uint64(len(s))))
		b.WriteString(s)
	}
	putString(string(e.Op))
	b.WriteByte(byte(e.Kind))
	putString(string(e.Path))
	putString(string(e.User))
	inner, nested := e.Err.(*Error)
	switch {
	case e.Err == nil:
		b.WriteByte(0)
	case nested && depth < maxErrorDepth:
		b.WriteByte(2)
		inner.marshal(b, depth+1)
	default:
		b.WriteByte(1)
		putString(e.Err.Error())
	}
}

// maxErrorDepth bounds the nesting of a decoded error.
const maxErrorDepth = 16

// UnmarshalError decodes an error encoded by [Error.MarshalBinary]. Bytes
// that are not such an encoding yield an Invalid error describing the
// problem; the result is never nil.
func UnmarshalError(data []byte) error {
	if !bytes.HasPrefix(data, []byte(errorMagic)) {
		return E(Invalid, "malformed error encoding: bad magic")
	}
	d := errDecoder{data: data[len(errorMagic):]}
	e := d.decode(0)
	if d.err != nil {
		return E(Invalid, fmt.Sprintf("malformed error encoding: %v", d.err))
	}
	if len(d.data) != 0 {
		return E(Invalid, "malformed error encoding: trailing bytes")
	}
	return e
}

type errDecoder struct {
	data []byte
	err  error
}

func (d *errDecoder) string() string {
	if d.err != nil {
		return ""
	}
	n, k := binary.Uvarint(d.data)
	if k <= 0 || n > uint64(len(d.data)-k) {
		d.err = errors.New("bad string length")
		return ""
	}
	s := string(d.data[k : k+int(n)])
	d.data = d.data[k+int(n):]
	return s
}

func (d *errDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.data) == 0 {
		d.err = errors.New("short data")
		return 0
	}
	c := d.data[0]
	d.data = d.data[1:]
	return c
}

func (d *errDecoder) decode(depth int) *Error {
	if depth > maxErrorDepth {
		d.err = errors.New("errors nested too deeply")
		return nil
	}
	e := &Error{}
	e.Op = Op(d.string())
	k := Kind(d.byte())
	if k >= kindEnd {
		k = Other // A kind from a newer peer: keep the message, lose the class.
	}
	e.Kind = k
	e.Path = PathName(d.string())
	e.User = UserName(d.string())
	switch d.byte() {
	case 0:
	case 1:
		e.Err = errors.New(d.string())
	case 2:
		if inner := d.decode(depth + 1); inner != nil {
			e.Err = inner
		}
	default:
		if d.err == nil {
			d.err = errors.New("bad underlying error tag")
		}
	}
	if d.err != nil {
		return nil
	}
	return e
}
