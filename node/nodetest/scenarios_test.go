package nodetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/pack"
)

const (
	ann  spindle.UserName = "ann@example.com"
	bob  spindle.UserName = "bob@example.com"
	carl spindle.UserName = "carl@other.org"
)

// A scenario is one end-to-end story, run in every kind of environment
// unless procsOnly says it needs a real process.
type scenario struct {
	name      string
	procsOnly bool
	run       func(t *testing.T, r *Runner)
}

var scenarios = []scenario{
	{"put-get-packings", false, putGetPackings},
	{"glob-and-ls", false, globAndList},
	{"mkdir-rm-mv", false, mkdirRmMv},
	{"links", false, links},
	{"sequence-numbers", false, sequenceNumbers},
	{"grant-each-right", false, grantEachRight},
	{"grant-domain-all-groups", false, grantDomainAllGroups},
	{"revoke-reader", false, revokeReader},
	{"private-permission-notexist", false, privatePermissionNotExist},
	{"list-needs-list", false, listNeedsList},
	{"access-files-owner-only", false, accessFilesOwnerOnly},
	{"rewrap-on-access-change", false, rewrapOnAccessChange},
	{"bad-input", false, badInput},
	{"open-to-all", false, openToAll},
	{"missing-groups-warn", false, missingGroupsWarn},
	{"bad-rules-change-nothing", false, badRulesChangeNothing},
	{"restart-keeps-everything", false, restartKeepsEverything},
	{"corrupt-block-detected", false, corruptBlockDetected},
	{"kill-during-put", true, killDuringPut},
}

func TestScenarios(t *testing.T) {
	for _, kind := range []string{InProc, Procs} {
		for _, sc := range scenarios {
			t.Run(kind+"/"+sc.name, func(t *testing.T) {
				if sc.procsOnly && kind != Procs {
					t.Skip("needs a real node process")
				}
				env := New(t, Setup{Kind: kind, Users: []spindle.UserName{ann, bob, carl}})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				r := NewRunner(ctx, env)
				sc.run(t, r)
				if r.Failed() {
					t.Fatal(r.Diag())
				}
			})
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func putGetPackings(t *testing.T, r *Runner) {
	for _, p := range []spindle.Packing{spindle.EEPack, spindle.EEIntegrityPack, spindle.PlainPack} {
		name := spindle.PathName("ann@example.com/" + p.String())
		r.PutPacking(name, "hello, "+p.String(), p)
		r.Check(r.Entry() != nil && r.Entry().Packing == p, "packing of %s", name)
		r.Get(name)
		r.GotData("hello, " + p.String())
	}
	r.Put("ann@example.com/empty", "")
	r.Get("ann@example.com/empty")
	r.GotData("")
	big := randomBytes(2<<20 + 77)
	r.PutBytes("ann@example.com/big", big)
	r.Check(r.Entry() != nil && len(r.Entry().Blocks) == 3, "a file of 2 MiB+77 has 3 blocks")
	r.Get("ann@example.com/big")
	r.GotBytes(big)
	r.Do(func(ctx context.Context, c spindle.Client) error {
		f, err := c.Open(ctx, "ann@example.com/big")
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, 1000)
		off := int64(1<<20 - 500)
		if _, err := f.ReadAt(buf, off); err != nil {
			return err
		}
		if !bytes.Equal(buf, big[off:off+1000]) {
			return errors.New("random read across a block boundary returned wrong bytes")
		}
		return nil
	})
}

func globAndList(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/docs")
	r.Put("ann@example.com/docs/a.txt", "a")
	r.Put("ann@example.com/docs/b.txt", "b")
	r.Put("ann@example.com/docs/c.md", "c")
	r.Glob("ann@example.com/docs/*.txt")
	r.GotEntries("ann@example.com/docs/a.txt", "ann@example.com/docs/b.txt")
	r.Glob("@/docs/*")
	r.GotEntries("ann@example.com/docs/a.txt", "ann@example.com/docs/b.txt", "ann@example.com/docs/c.md")
	r.Glob("ann@example.com/*")
	r.GotEntries("ann@example.com/docs")
}

func mkdirRmMv(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/d")
	r.MakeDir("ann@example.com/d/e")
	r.Put("ann@example.com/d/e/f", "deep")
	r.Put("ann@example.com/d/g", "shallow")
	r.MakeDir("ann@example.com/d")
	r.Want(spindle.Exist)
	r.MakeDir("ann@example.com/nope/x")
	r.Want(spindle.NotExist)
	r.Delete("ann@example.com/d")
	r.Want(spindle.NotEmpty)
	// Move a file, then a whole non-empty directory.
	r.Rename("ann@example.com/d/g", "ann@example.com/g2")
	r.Get("ann@example.com/g2")
	r.GotData("shallow")
	r.Lookup("ann@example.com/d/g")
	r.Want(spindle.NotExist)
	r.Rename("ann@example.com/d", "ann@example.com/moved")
	r.Get("ann@example.com/moved/e/f")
	r.GotData("deep")
	r.Lookup("ann@example.com/d")
	r.Want(spindle.NotExist)
	r.Delete("ann@example.com/moved/e/f")
	r.Delete("ann@example.com/moved/e")
	r.Delete("ann@example.com/moved")
	r.Glob("ann@example.com/*")
	r.GotEntries("ann@example.com/g2")
}

func links(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/real")
	r.Put("ann@example.com/real/file", "linked")
	r.PutLink("ann@example.com/real/file", "ann@example.com/flink")
	r.Get("ann@example.com/flink")
	r.GotData("linked")
	r.Lookup("ann@example.com/flink")
	r.Check(r.Entry() != nil && r.Entry().Attr.IsLink() && r.Entry().Link == "ann@example.com/real/file", "lookup without follow returns the link")
	r.PutLink("ann@example.com/real", "ann@example.com/dlink")
	r.Get("ann@example.com/dlink/file")
	r.GotData("linked")
}

func sequenceNumbers(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/s")
	r.Lookup("ann@example.com/s")
	var dirSeq int64
	if e := r.Entry(); e != nil {
		dirSeq = e.Sequence
	}
	r.Put("ann@example.com/s/x", "1")
	var fileSeq int64
	if e := r.Entry(); e != nil {
		fileSeq = e.Sequence
	}
	r.Check(fileSeq > dirSeq, "file sequence %d after directory's %d", fileSeq, dirSeq)
	r.Lookup("ann@example.com/s")
	r.GotSequence(func(s int64) bool { return s == fileSeq }, "the sequence of the change below it")
	r.Put("ann@example.com/s/x", "2")
	r.Lookup("ann@example.com/s/x")
	r.GotSequence(func(s int64) bool { return s > fileSeq }, "a higher sequence after overwrite")
}

func grantEachRight(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/p")
	r.Put("ann@example.com/p/file", "secret")
	r.Put("ann@example.com/p/Access", "*: ann@example.com\n")
	// bob has nothing.
	r.As(bob)
	r.Get("ann@example.com/p/file")
	r.Want(spindle.Private)
	// Read.
	r.As(ann)
	r.Put("ann@example.com/p/Access", "*: ann@example.com\nread: bob@example.com\n")
	r.As(bob)
	r.Get("ann@example.com/p/file")
	r.GotData("secret")
	r.Put("ann@example.com/p/file", "bob was here")
	r.Want(spindle.Permission)
	// Read alone does not list (Upspin: a directory that may not be
	// listed is Private to Glob).
	r.Glob("ann@example.com/p/*")
	r.Want(spindle.Private)
	// List: sees the name, not the contents.
	r.As(ann)
	r.Put("ann@example.com/p/Access", "*: ann@example.com\nlist: bob@example.com\n")
	r.As(bob)
	r.Glob("ann@example.com/p/*")
	r.GotEntries("ann@example.com/p/Access", "ann@example.com/p/file")
	r.Lookup("ann@example.com/p/file")
	r.GotIncomplete(true)
	r.Get("ann@example.com/p/file")
	r.Want(spindle.Permission)
	// Write: may overwrite, not create.
	r.As(ann)
	r.Put("ann@example.com/p/Access", "*: ann@example.com\nwrite: bob@example.com\n")
	r.As(bob)
	r.Put("ann@example.com/p/file", "overwritten by bob")
	r.Put("ann@example.com/p/new", "x")
	r.Want(spindle.Permission)
	r.As(ann)
	r.Get("ann@example.com/p/file")
	r.GotData("overwritten by bob")
	// Create.
	r.Put("ann@example.com/p/Access", "*: ann@example.com\ncreate: bob@example.com\n")
	r.As(bob)
	r.Put("ann@example.com/p/new", "created by bob")
	r.Delete("ann@example.com/p/new")
	r.Want(spindle.Permission)
	// Delete.
	r.As(ann)
	r.Put("ann@example.com/p/Access", "*: ann@example.com\ndelete: bob@example.com\n")
	r.As(bob)
	r.Delete("ann@example.com/p/new")
	r.As(ann)
	r.Lookup("ann@example.com/p/new")
	r.Want(spindle.NotExist)
}

// listNeedsList pins Upspin's listing rules: a pattern looks only inside
// directories the user may list, at every level (one that may not be
// listed is Private), and read alone fetches a file whose name is known.
func listNeedsList(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/rd")
	r.Put("ann@example.com/rd/Access", "*: ann@example.com\nread: bob@example.com\n")
	r.Put("ann@example.com/rd/f", "known name")
	r.MakeDir("ann@example.com/rd/sub")
	r.Put("ann@example.com/rd/sub/Access", "*: ann@example.com\nread, list: bob@example.com\n")
	r.Put("ann@example.com/rd/sub/g", "g")
	r.As(bob)
	r.Get("ann@example.com/rd/f")
	r.GotData("known name")
	r.Glob("ann@example.com/rd/*") // ls of a directory bob may read, not list.
	r.Want(spindle.Private)
	r.Glob("ann@example.com/*") // A root bob may not list.
	r.Want(spindle.Private)
	r.Glob("ann@example.com/rd/*/*") // The search starts in rd.
	r.Want(spindle.Private)
	r.Glob("ann@example.com/rd/sub/*") // A directory bob may list.
	r.GotEntries("ann@example.com/rd/sub/Access", "ann@example.com/rd/sub/g")
	r.As(carl)
	r.Glob("ann@example.com/rd/nothing/*") // No right: missing is Private too.
	r.Want(spindle.Private)
}

func grantDomainAllGroups(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/dom")
	r.Put("ann@example.com/dom/Access", "*: ann@example.com\nr,l: *@example.com\n")
	r.Put("ann@example.com/dom/f", "for example.com")
	r.As(bob)
	r.Get("ann@example.com/dom/f")
	r.GotData("for example.com")
	r.As(carl)
	r.Get("ann@example.com/dom/f")
	r.Want(spindle.Private)

	r.As(ann)
	r.MakeDir("ann@example.com/pub")
	r.Put("ann@example.com/pub/Access", "*: ann@example.com\nread: all\nlist: all\n")
	r.Put("ann@example.com/pub/f", "for everyone")
	r.Check(r.Entry() != nil && r.Entry().Packing == spindle.EEIntegrityPack, "a file readable by all is stored with eeintegrity")
	r.As(carl)
	r.Get("ann@example.com/pub/f")
	r.GotData("for everyone")

	// Groups, nested: friends includes carl's group, which includes carl.
	r.As(ann)
	r.MakeDir("ann@example.com/Group")
	r.Put("ann@example.com/Group/friends", "bob@example.com, carl@other.org/Group/mates\n")
	r.As(carl)
	r.MakeDir("carl@other.org/Group")
	r.Put("carl@other.org/Group/mates", "carl@other.org\n")
	r.Put("carl@other.org/Group/Access", "r: all\n")
	r.As(ann)
	r.MakeDir("ann@example.com/grp")
	r.Put("ann@example.com/grp/Access", "*: ann@example.com\nread, list: friends\n")
	r.Put("ann@example.com/grp/f", "for friends")
	r.As(bob)
	r.Get("ann@example.com/grp/f")
	r.GotData("for friends")
	r.As(carl)
	r.Get("ann@example.com/grp/f")
	r.GotData("for friends")
}

func revokeReader(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/rv")
	r.Put("ann@example.com/rv/Access", "*: ann@example.com\nread, list: bob@example.com\n")
	r.Put("ann@example.com/rv/old", "bob may read")
	r.Readers("ann@example.com/rv/old")
	r.GotReaders(ann, bob)
	r.As(ann)
	r.Put("ann@example.com/rv/Access", "*: ann@example.com\n")
	r.Put("ann@example.com/rv/new", "bob may not read")
	r.Readers("ann@example.com/rv/new")
	r.GotReaders(ann)
	// The Access change re-wrapped the old file too.
	r.Readers("ann@example.com/rv/old")
	r.GotReaders(ann)
	r.As(bob)
	r.Get("ann@example.com/rv/new")
	r.Want(spindle.Private)
}

func privatePermissionNotExist(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/ppn")
	r.Put("ann@example.com/ppn/Access", "*: ann@example.com\nlist: bob@example.com\n")
	r.Put("ann@example.com/ppn/there", "x")
	r.As(bob)
	r.Lookup("ann@example.com/ppn/missing")
	r.Want(spindle.NotExist)
	r.Get("ann@example.com/ppn/there")
	r.Want(spindle.Permission)
	r.As(carl)
	r.Lookup("ann@example.com/ppn/missing")
	r.Want(spindle.Private)
	r.Lookup("ann@example.com/ppn/there")
	r.Want(spindle.Private)
}

func accessFilesOwnerOnly(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/open")
	r.Put("ann@example.com/open/Access", "*: all\n")
	r.As(bob)
	r.Put("ann@example.com/open/file", "bob may write here")
	r.Put("ann@example.com/open/Access", "*: bob@example.com\n")
	r.Want(spindle.Permission)
	r.Put("ann@example.com/Group/x", "bob@example.com\n")
	r.Want(spindle.Private) // bob has no right at all on ann@example.com/Group.
	r.Delete("ann@example.com/open/Access")
	r.Want(spindle.Permission)
}

func rewrapOnAccessChange(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/rw")
	r.Put("ann@example.com/rw/a", "one")
	r.MakeDir("ann@example.com/rw/sub")
	r.Put("ann@example.com/rw/sub/b", "two")
	r.As(bob)
	r.Get("ann@example.com/rw/a")
	r.Want(spindle.Private)
	r.As(ann)
	r.Share("ann@example.com/rw", true, false)
	// Grant read: existing files become readable at once, no share -fix.
	r.Put("ann@example.com/rw/Access", "read, list: bob@example.com\n")
	r.As(bob)
	r.Get("ann@example.com/rw/a")
	r.GotData("one")
	r.Get("ann@example.com/rw/sub/b")
	r.GotData("two")
}

func badInput(t *testing.T, r *Runner) {
	r.Put("ann@example.com/Access", "read bob@example.com\n")
	r.Want(spindle.Invalid)
	r.Put("ann@example.com/Access", "rea: bob@example.com\n")
	r.Want(spindle.Invalid)
	r.MakeDir("ann@example.com/Group")
	r.Put("ann@example.com/Group/g", "all\n")
	r.Want(spindle.Invalid)
	r.Put("not a name/x", "x")
	r.Want(spindle.Invalid)
	r.Put("ann@nodot/x", "x")
	r.Want(spindle.Invalid)
	r.Get("nobody@nowhere.org/x")
	r.Want(spindle.Private) // An unknown user's tree reveals nothing.
	r.Do(func(ctx context.Context, c spindle.Client) error {
		_, err := c.LookupUser(ctx, "nobody@nowhere.org")
		if !errors.Is(err, spindle.NotExist) {
			return errors.New("lookup of an unknown user: want NotExist, got " + errString(err))
		}
		_, err = c.Put(ctx, "ann@example.com/Access", strings.NewReader("no colon here\n"), 0, nil)
		if err == nil || !strings.Contains(err.Error(), "line 1") {
			return errors.New("a malformed Access file's error must name the line: " + errString(err))
		}
		return nil
	})
	// Nothing bad was stored.
	r.WhichAccess("ann@example.com/x")
	r.GotNoEntry()
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func restartKeepsEverything(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/keep")
	r.Put("ann@example.com/keep/Access", "*: ann@example.com\nr,l: bob@example.com\n")
	data := randomBytes(1<<20 + 3)
	r.PutBytes("ann@example.com/keep/f", data)
	r.Check(r.env.Restart() == nil, "restart")
	r.Get("ann@example.com/keep/f")
	r.GotBytes(data)
	r.As(bob)
	r.Get("ann@example.com/keep/f")
	r.GotBytes(data)
	r.As(ann)
	r.Put("ann@example.com/keep/after", "after restart")
	r.Get("ann@example.com/keep/after")
	r.GotData("after restart")
}

func corruptBlockDetected(t *testing.T, r *Runner) {
	// A small block, kept in a segment file with others, and a large one,
	// kept in a file of its own.
	for _, f := range []struct {
		name spindle.PathName
		data string
	}{
		{"ann@example.com/c", "this block will rot on disk"},
		{"ann@example.com/c-large", string(randomBytes(200 << 10))},
	} {
		r.Put(f.name, f.data)
		e := r.Entry()
		if e == nil || len(e.Blocks) != 1 {
			r.Check(false, "no entry with one block")
			return
		}
		d, err := blocks.ParseRef(e.Blocks[0].Ref)
		if err != nil {
			r.Check(false, "parse ref: %v", err)
			return
		}
		file, off := FindBlock(r.env.Home, d)
		if file == "" {
			r.Check(false, "block %s not found under %s", e.Blocks[0].Ref, r.env.Home)
			return
		}
		b, err := os.ReadFile(file)
		r.Check(err == nil && len(b) > int(off)+10, "read block file")
		b[off+10] ^= 0x40
		r.Check(os.WriteFile(file, b, 0o600) == nil, "write block file")
		r.Get(f.name)
		r.Want(spindle.Integrity)
		if off == 0 {
			_, err = os.Stat(file)
			r.Check(os.IsNotExist(err), "the corrupt block file was removed, not served again")
		}
		r.Get(f.name)
		r.Want(spindle.NotExist) // The copy is gone; the node no longer has the block.
	}
}

// killDuringPut kills the node with SIGKILL while a large file is being
// stored: afterwards the file is either absent or whole, never half there.
func killDuringPut(t *testing.T, r *Runner) {
	data := randomBytes(64 << 20)
	c, err := r.env.Client(ann)
	if err != nil {
		r.Check(false, "client: %v", err)
		return
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once bool
		_, err := c.Put(r.ctx, "ann@example.com/killed", bytes.NewReader(data), 0, func(n int64) {
			if !once && n > 8<<20 {
				once = true
				close(started)
			}
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		r.Check(false, "put finished before the kill: %v", err)
		return
	}
	r.Check(r.env.Kill() == nil, "kill -9 and restart")
	<-done
	r.Get("ann@example.com/killed")
	if r.err != nil && r.fresh && errors.Is(r.err, spindle.NotExist) {
		r.Want(spindle.NotExist)
		return
	}
	r.GotBytes(data)
	_ = io.EOF
}

// An ee file written before its tree was opened to all becomes readable by
// anyone, through a wrap for the all users key, and stops being so when
// all is revoked.
func openToAll(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/pub")
	r.Put("ann@example.com/pub/old", "written as ee")
	r.Check(r.Entry() != nil && r.Entry().Packing == spindle.EEPack, "a private file is ee")
	r.As(carl)
	r.Get("ann@example.com/pub/old")
	r.Want(spindle.Private)

	r.As(ann)
	r.Put("ann@example.com/pub/Access", "*: ann@example.com\nread, list: all\n")
	r.GotWarning()
	r.Readers("ann@example.com/pub/old")
	r.GotReaders(spindle.AllUsers, ann)
	r.Share("ann@example.com/pub", true, false)
	r.Check(len(r.Shares()) == 1 && len(r.Shares()[0].Missing) == 0 && slices.Contains(r.Shares()[0].Wrapped, spindle.AllUsers),
		"share after opening to all: %+v", r.Shares())
	// Readers with no key of their own wrapped read it.
	for _, u := range []spindle.UserName{bob, carl} {
		r.As(u)
		r.Get("ann@example.com/pub/old")
		r.GotData("written as ee")
	}
	r.Lookup("ann@example.com/pub/old")
	r.Check(r.Entry() != nil && r.Entry().Packing == spindle.EEPack && r.Entry().Writer == ann, "the file stays ee, written by ann")

	// Revoked: the wrap for all goes, as any reader's does.
	r.As(ann)
	r.Put("ann@example.com/pub/Access", "*: ann@example.com\nread: bob@example.com\n")
	r.Readers("ann@example.com/pub/old")
	r.GotReaders(ann, bob)
	r.Share("ann@example.com/pub", true, true)
	r.Check(len(r.Shares()) == 1 && !r.Shares()[0].Fixed, "share -fix after revoking all found work left: %+v", r.Shares())
	r.As(bob)
	r.Get("ann@example.com/pub/old")
	r.GotData("written as ee")
	r.Do(func(ctx context.Context, c spindle.Client) error {
		e, err := c.Lookup(ctx, "ann@example.com/pub/old", false)
		if err != nil {
			return err
		}
		if all, err := pack.IsWrappedForAll(e); err != nil || all {
			return fmt.Errorf("after revoking all the file is still wrapped for all (%v)", err)
		}
		return nil
	})
}

// An Access file that names a group that does not exist, or that the owner
// cannot read, is stored, with a warning naming the group; nobody loses a
// key because a group could not be read.
func missingGroupsWarn(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/mg")
	r.Put("ann@example.com/mg/f", "for bob and friends")
	r.Put("ann@example.com/mg/Access", "*: ann@example.com\nread: bob@example.com, friends\n")
	r.GotWarning(Problem{spindle.NotExist, "ann@example.com/Group/friends"})
	r.WhichAccess("ann@example.com/mg/f")
	r.GotEntry("ann@example.com/mg/Access")
	r.As(bob)
	r.Get("ann@example.com/mg/f")
	r.GotData("for bob and friends")
	r.As(carl)
	r.Do(func(ctx context.Context, c spindle.Client) error {
		// Which error carl gets is the business of the read-rights rules.
		if f, err := c.Open(ctx, "ann@example.com/mg/f"); err == nil {
			f.Close()
			return errors.New("carl, in no group yet, opened the file")
		}
		return nil
	})

	// The group made later: its members get keys at once.
	r.As(ann)
	r.MakeDir("ann@example.com/Group")
	r.Put("ann@example.com/Group/friends", "carl@other.org\n")
	r.GotWarning()
	r.As(carl)
	r.Get("ann@example.com/mg/f")
	r.GotData("for bob and friends")
	// A Group file naming a group that does not exist is stored too.
	r.As(ann)
	r.Put("ann@example.com/Group/friends", "carl@other.org, cousins\n")
	r.GotWarning(Problem{spindle.NotExist, "ann@example.com/Group/cousins"})
	r.Get("ann@example.com/Group/friends")
	r.GotData("carl@other.org, cousins\n")
	r.As(carl)
	r.Get("ann@example.com/mg/f")
	r.GotData("for bob and friends")

	// A group of carl's that ann may not read: stored, with a warning;
	// bob and carl keep their keys, since they may be its members.
	r.MakeDir("carl@other.org/Group")
	r.Put("carl@other.org/Group/Access", "*: carl@other.org\nread: bob@example.com\n")
	r.Put("carl@other.org/Group/mates", "bob@example.com\n")
	r.As(ann)
	r.Put("ann@example.com/mg/Access", "*: ann@example.com\nread: carl@other.org/Group/mates\n")
	r.GotWarning(Problem{spindle.Other, "carl@other.org/Group/mates"})
	// ann cannot name bob and carl now, and is told so.
	r.Readers("ann@example.com/mg/f")
	r.GotReaders(ann)
	r.GotWarning(Problem{spindle.Other, "carl@other.org/Group/mates"}, Problem{spindle.Other, "ann@example.com/mg/f"})
	r.Share("ann@example.com/mg", false, true)
	r.Check(len(r.Shares()) == 1 && len(r.Shares()[0].Groups) == 1 && len(r.Shares()[0].Extra) == 0 &&
		len(r.Shares()[0].Unsure)+len(r.Shares()[0].Unknowns) == 2 && !r.Shares()[0].Fixed,
		"share with an unreadable group: %+v", r.Shares())
	r.As(bob)
	r.Get("ann@example.com/mg/f")
	r.GotData("for bob and friends")
	// bob, who may read the group, names them all.
	r.Readers("ann@example.com/mg/f")
	r.GotReaders(ann, bob, carl)
	r.GotWarning()

	// Opened to all (every holder keeps a key: all are readers) and then
	// given to the unreadable group: the wrap for all goes, since no group
	// holds all, and the others stay.
	r.As(ann)
	r.Put("ann@example.com/mg/Access", "*: ann@example.com\nread: all\n")
	r.Readers("ann@example.com/mg/f")
	r.GotReaders(spindle.AllUsers, ann)
	r.Put("ann@example.com/mg/Access", "*: ann@example.com\nread: carl@other.org/Group/mates\n")
	r.As(bob)
	r.Readers("ann@example.com/mg/f")
	r.GotReaders(ann, bob, carl)
	r.Get("ann@example.com/mg/f")
	r.GotData("for bob and friends")
}

// A put of an Access or Group file that fails changes nothing.
func badRulesChangeNothing(t *testing.T, r *Runner) {
	r.MakeDir("ann@example.com/br")
	r.Put("ann@example.com/br/f", "x")
	r.Put("ann@example.com/br/Access", "*: ann@example.com\nread: bob@example.com\n")
	r.MakeDir("ann@example.com/Group")
	r.Put("ann@example.com/Group/g", "bob@example.com\n")
	for _, tc := range []struct {
		name spindle.PathName
		text string
		line string
	}{
		{"ann@example.com/br/Access", "read: bob@example.com\nwrite: ann@example.com # \x1b[2J\n", "line 2"},
		{"ann@example.com/br/Access", "read: friends//x\n", "line 1"},
		{"ann@example.com/Group/g", "carl@other.org\n\xff\n", "line 2"},
		{"ann@example.com/Group/g", "carl@other.org, ,\n", "line 1"},
		{"ann@example.com/Group/g", "carl@@other.org\n", "line 1"},
	} {
		r.Do(func(ctx context.Context, c spindle.Client) error {
			_, err := c.Put(ctx, tc.name, strings.NewReader(tc.text), 0, nil)
			if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), tc.line) {
				return fmt.Errorf("put %s %q: %v; want Invalid naming %s", tc.name, tc.text, err, tc.line)
			}
			return nil
		})
	}
	r.Get("ann@example.com/br/Access")
	r.GotData("*: ann@example.com\nread: bob@example.com\n")
	r.Get("ann@example.com/Group/g")
	r.GotData("bob@example.com\n")
	r.Readers("ann@example.com/br/f")
	r.GotReaders(ann, bob)
	r.As(bob)
	r.Get("ann@example.com/br/f")
	r.GotData("x")
}
