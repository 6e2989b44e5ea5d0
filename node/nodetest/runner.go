package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"spindle.dev"
)

// A Runner runs the steps of a scenario as one user at a time, in the style
// of Upspin's testenv.Runner. Each step records its result; the first
// unexpected failure is kept together with the file and line of the step,
// and later steps are skipped. A scenario is a list of steps followed by
//
//	if r.Failed() { t.Fatal(r.Diag()) }
//
// A step that is meant to fail is followed by [Runner.Want] with the
// expected Kind, which consumes the failure.
type Runner struct {
	env  *Env
	ctx  context.Context
	user spindle.UserName

	err   error            // First unexpected failure, or the failure of the last step.
	where string           // file:line of the step that set err.
	who   spindle.UserName // The user of that step.
	fresh bool             // err was set by the last step and may still be consumed by Want.

	data    []byte              // Contents read by the last Get.
	entry   *spindle.DirEntry   // Entry returned by the last step.
	entries []*spindle.DirEntry // Entries returned by the last Glob.
	shares  []spindle.ShareReport
	warning *spindle.Warning // Returned by the last step, which succeeded.
}

// NewRunner returns a Runner acting, until As is called, as the first user
// of the environment.
func NewRunner(ctx context.Context, env *Env) *Runner {
	return &Runner{env: env, ctx: ctx, user: env.Users[0]}
}

// As makes later steps run as user u.
func (r *Runner) As(u spindle.UserName) { r.user = u }

// User returns the user steps run as.
func (r *Runner) User() spindle.UserName { return r.user }

// Env returns the environment the runner works in.
func (r *Runner) Env() *Env { return r.env }

func caller(skip int) string {
	_, file, line, ok := runtime.Caller(skip + 1)
	if !ok {
		return "?"
	}
	if i := strings.LastIndexByte(file, '/'); i >= 0 {
		file = file[i+1:]
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// step runs fn unless an earlier failure is pending, and records its error.
func (r *Runner) step(fn func(c spindle.Client) error) {
	if r.err != nil && !r.fresh {
		return
	}
	if r.err != nil && r.fresh {
		// The previous step failed and nobody consumed the failure.
		r.fresh = false
		return
	}
	r.entry, r.entries, r.data, r.shares, r.warning = nil, nil, nil, nil, nil
	c, err := r.env.Client(r.user)
	if err == nil {
		outer := r.ctx
		ctx, cancel := context.WithTimeout(outer, 2*time.Minute)
		r.ctx = ctx
		err = fn(c)
		r.ctx = outer
		cancel()
	}
	if w, ok := err.(*spindle.Warning); ok {
		// The step took effect; check what it could not do with GotWarning.
		r.warning, err = w, nil
	}
	if err != nil {
		r.err = err
		r.where = caller(2)
		r.who = r.user
		r.fresh = true
	}
}

// fail records a failed check at the caller's caller.
func (r *Runner) fail(format string, args ...any) bool {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
		r.where = caller(2)
		r.who = r.user
	}
	r.fresh = false
	return false
}

// pending reports whether checks should be skipped: a failure is pending.
func (r *Runner) pending() bool {
	if r.err != nil && r.fresh {
		r.fresh = false // An unexpected failure of the previous step.
	}
	return r.err != nil
}

// Put writes data to the file name with the user's default packing.
func (r *Runner) Put(name spindle.PathName, data string) {
	r.step(func(c spindle.Client) error {
		e, err := c.Put(r.ctx, name, strings.NewReader(data), spindle.UnknownPack, nil)
		r.entry = e
		return err
	})
}

// PutPacking writes data to the file name with packing p.
func (r *Runner) PutPacking(name spindle.PathName, data string, p spindle.Packing) {
	r.step(func(c spindle.Client) error {
		e, err := c.Put(r.ctx, name, strings.NewReader(data), p, nil)
		r.entry = e
		return err
	})
}

// PutBytes writes data to the file name.
func (r *Runner) PutBytes(name spindle.PathName, data []byte) {
	r.step(func(c spindle.Client) error {
		e, err := c.Put(r.ctx, name, bytes.NewReader(data), spindle.UnknownPack, nil)
		r.entry = e
		return err
	})
}

// Get reads the file name; check the result with GotData.
func (r *Runner) Get(name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		f, err := c.Open(r.ctx, name)
		if err != nil {
			return err
		}
		defer f.Close()
		r.data, err = io.ReadAll(f)
		return err
	})
}

// Lookup looks up name without following links; check with GotEntry.
func (r *Runner) Lookup(name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		e, err := c.Lookup(r.ctx, name, false)
		r.entry = e
		return err
	})
}

// MakeDir creates a directory.
func (r *Runner) MakeDir(name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		e, err := c.MakeDirectory(r.ctx, name)
		r.entry = e
		return err
	})
}

// Delete removes name.
func (r *Runner) Delete(name spindle.PathName) {
	r.step(func(c spindle.Client) error { return c.Delete(r.ctx, name) })
}

// Rename moves oldName to newName.
func (r *Runner) Rename(oldName, newName spindle.PathName) {
	r.step(func(c spindle.Client) error { return c.Rename(r.ctx, oldName, newName) })
}

// PutLink makes a link at name pointing to target.
func (r *Runner) PutLink(target, name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		e, err := c.PutLink(r.ctx, target, name)
		r.entry = e
		return err
	})
}

// Glob lists the entries matching pattern; check with GotEntries.
func (r *Runner) Glob(pattern string) {
	r.step(func(c spindle.Client) error {
		es, err := c.Glob(r.ctx, pattern)
		r.entries = es
		return err
	})
}

// WhichAccess finds the Access file governing name; check with GotEntry.
func (r *Runner) WhichAccess(name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		e, err := c.WhichAccess(r.ctx, name)
		r.entry = e
		return err
	})
}

// Share reports (or with fix, repairs) the wrapped keys under name.
func (r *Runner) Share(name spindle.PathName, recursive, fix bool) {
	r.step(func(c spindle.Client) error {
		rep, err := c.Share(r.ctx, name, recursive, fix)
		r.shares = rep
		return err
	})
}

// Readers records who holds wrapped keys for name; check with GotReaders.
func (r *Runner) Readers(name spindle.PathName) {
	r.step(func(c spindle.Client) error {
		us, err := c.Readers(r.ctx, name)
		r.entries = nil
		r.shares = []spindle.ShareReport{{Name: name, Wrapped: us}}
		return err
	})
}

// Do runs an arbitrary step with the current user's client.
func (r *Runner) Do(fn func(ctx context.Context, c spindle.Client) error) {
	r.step(func(c spindle.Client) error { return fn(r.ctx, c) })
}

// Want checks that the last step failed with an error of kind k and
// consumes that failure.
func (r *Runner) Want(k spindle.Kind) bool {
	if r.err != nil && !r.fresh {
		return false
	}
	if r.err == nil {
		return r.fail("step succeeded, want error %q", k)
	}
	if !errors.Is(r.err, k) {
		err := r.err
		r.err = nil
		return r.fail("got error %q, want kind %q", err, k)
	}
	r.err, r.fresh = nil, false
	return true
}

// GotData checks the contents read by the last Get.
func (r *Runner) GotData(want string) bool {
	if r.pending() {
		return false
	}
	if string(r.data) != want {
		return r.fail("got data %q, want %q", abbrev(r.data), abbrev([]byte(want)))
	}
	return true
}

// GotBytes checks the contents read by the last Get.
func (r *Runner) GotBytes(want []byte) bool {
	if r.pending() {
		return false
	}
	if !bytes.Equal(r.data, want) {
		return r.fail("got %d bytes of data, want %d bytes (contents differ)", len(r.data), len(want))
	}
	return true
}

// GotEntry checks that the last step returned an entry named name.
func (r *Runner) GotEntry(name spindle.PathName) bool {
	if r.pending() {
		return false
	}
	if r.entry == nil {
		return r.fail("got no entry, want %s", name)
	}
	if r.entry.Name != name {
		return r.fail("got entry %s, want %s", r.entry.Name, name)
	}
	return true
}

// GotNoEntry checks that the last step returned no entry (WhichAccess with none).
func (r *Runner) GotNoEntry() bool {
	if r.pending() {
		return false
	}
	if r.entry != nil {
		return r.fail("got entry %s, want none", r.entry.Name)
	}
	return true
}

// Entry returns the entry of the last step, or nil.
func (r *Runner) Entry() *spindle.DirEntry { return r.entry }

// Data returns the data read by the last Get.
func (r *Runner) Data() []byte { return r.data }

// GotEntries checks the names returned by the last Glob, in order.
func (r *Runner) GotEntries(names ...spindle.PathName) bool {
	if r.pending() {
		return false
	}
	var got []spindle.PathName
	for _, e := range r.entries {
		got = append(got, e.Name)
	}
	if !slices.Equal(got, names) {
		return r.fail("got entries %v, want %v", got, names)
	}
	return true
}

// GotIncomplete checks that the last entry was returned without its
// blocks and keys, as to a user who may list but not read it.
func (r *Runner) GotIncomplete(want bool) bool {
	if r.pending() {
		return false
	}
	if r.entry == nil {
		return r.fail("got no entry")
	}
	inc := r.entry.Attr.IsIncomplete()
	if inc != want {
		return r.fail("entry %s: incomplete=%v, want %v", r.entry.Name, inc, want)
	}
	if inc && (len(r.entry.Blocks) > 0 || len(r.entry.Packdata) > 0) {
		return r.fail("incomplete entry %s still carries blocks or packdata", r.entry.Name)
	}
	return true
}

// GotSequence checks the sequence number of the last entry.
func (r *Runner) GotSequence(check func(seq int64) bool, what string) bool {
	if r.pending() {
		return false
	}
	if r.entry == nil {
		return r.fail("got no entry")
	}
	if !check(r.entry.Sequence) {
		return r.fail("entry %s has sequence %d, want %s", r.entry.Name, r.entry.Sequence, what)
	}
	return true
}

// GotReaders checks the users holding wrapped keys, as recorded by Readers.
func (r *Runner) GotReaders(users ...spindle.UserName) bool {
	if r.pending() {
		return false
	}
	if len(r.shares) == 0 {
		return r.fail("no readers recorded")
	}
	got := slices.Clone(r.shares[0].Wrapped)
	slices.Sort(got)
	want := slices.Clone(users)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return r.fail("%s: got readers %v, want %v", r.shares[0].Name, got, want)
	}
	return true
}

// GotWarning checks that the last step succeeded with a warning whose
// problems are, in any order, errors of the given kinds naming the given
// paths (pairs of kind and path); with no pairs, that it had no warning.
func (r *Runner) GotWarning(want ...Problem) bool {
	if r.pending() {
		return false
	}
	var got []error
	if r.warning != nil {
		got = r.warning.Problems
	}
	if len(got) != len(want) {
		return r.fail("got warning %v, want %d problems %v", r.warning, len(want), want)
	}
	for _, p := range want {
		if !slices.ContainsFunc(got, func(err error) bool { return spindle.Match(spindle.E(p.Kind, p.Path), err) }) {
			return r.fail("warning %v has no problem of kind %q about %s", r.warning, p.Kind, p.Path)
		}
	}
	return true
}

// A Problem is what GotWarning expects: a kind (Other for any) and a path.
type Problem struct {
	Kind spindle.Kind
	Path spindle.PathName
}

// Shares returns the reports of the last Share step.
func (r *Runner) Shares() []spindle.ShareReport { return r.shares }

// Check records a failure with the message if ok is false.
func (r *Runner) Check(ok bool, format string, args ...any) bool {
	if r.pending() {
		return false
	}
	if !ok {
		return r.fail(format, args...)
	}
	return true
}

// Failed reports whether a step failed unexpectedly or a check failed.
func (r *Runner) Failed() bool {
	return r.err != nil
}

// Diag describes the first failure and where it happened.
func (r *Runner) Diag() string {
	if r.err == nil {
		return "no failure"
	}
	return fmt.Sprintf("%s: as %s: %v", r.where, r.who, r.err)
}

func abbrev(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}
