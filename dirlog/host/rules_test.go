package host

import (
	"strings"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Access and Group files are checked with access.Check when appended, so
// that a client that skips the check cannot store one that Check refuses;
// such files already in a log replay as they were read.
func TestRulesCheckedOnAppend(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			store := k.new(t)
			e := newEnv(t, store)
			e.setup()
			ctx := e.ctx
			c := e.as(ann)
			e.do(c.MakeDirectory(ctx, "ann@example.com/Group"))
			want := e.dump(ann)
			for _, tc := range []struct {
				name spindle.PathName
				text string
				line string
			}{
				{"ann@example.com/Group/friends", "bob@example.com\n# \x1b[2J\n", "line 2"},
				{"ann@example.com/Group/friends", "bob@example.com caf\xe9@example.com\n", "line 1"},
				{"ann@example.com/Group/friends", "\n\nwork//mates\n", "line 3"},
				{"ann@example.com/Group/friends", "bob@example.com\rfake line\n", "line 1"},
				{"ann@example.com/docs/Access", "r: bob@example.com # \xff\n", "line 1"},
				{"ann@example.com/docs/Access", "r: friends/\n", "line 1"},
			} {
				_, err := c.Put(ctx, control(tc.name, tc.text))
				wantKind(t, err, spindle.Invalid, string(tc.name)+" "+tc.text)
				if !strings.Contains(err.Error(), tc.line) {
					t.Errorf("error %q does not name %s", err, tc.line)
				}
			}
			if got := e.dump(ann); got != want {
				t.Fatalf("refused files changed the tree:\n%s\nwant\n%s", got, want)
			}

			// Written before the check existed: a Group file with a control
			// character in a comment. It replays, and still grants.
			h := e.do2(e.s.Head(ctx, ann))
			e.s.Close()
			old := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Writer: ann, Op: dirlog.OpPut,
				Entry: *withSeq(control("ann@example.com/Group/friends", "bob@example.com # \x1b[2J\n"), ann, h.Seq+1)}
			if err := old.Sign(e.signers[ann]); err != nil {
				t.Fatal(err)
			}
			appendRaw(t, k, store, ann, old)
			e.open()
			if d := e.s.Damage(); len(d) != 0 {
				t.Fatalf("an old Group file that Check refuses cut the log: %v", d)
			}
			e.do(e.as(ann).Put(ctx, control("ann@example.com/docs/Access", "r: friends\n")))
			if d, err := e.as(bob).Lookup(ctx, "ann@example.com/docs/a.txt"); err != nil || d.Attr.IsIncomplete() {
				t.Fatalf("bob, a member of the old group, reading: %v", err)
			}
		})
	}
}
