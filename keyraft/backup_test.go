package keyraft

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A member backed up while it runs starts on a new home as the same
// member with the same state, key and tree head, and goes on taking
// records; a backup taken when nothing is new since the last snapshot
// holds that snapshot; a backup never writes over a directory.
func TestBackupRestores(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	c := diskCluster(t, dir, true)
	ss := populate(t, c, 0, 20)
	k := newSigner(t, ann)
	v1 := register(t, k)
	mustPut(t, c, v1)
	want := snapshotBytes(t, c.fsm)
	head, _ := c.Head(ctx)
	vkey := c.VerifierKey()

	backup := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(backup, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.Backup(filepath.Join(backup, "raft")); err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "raft")
	if err := c.Backup(again); err != nil {
		t.Fatalf("a second backup, with nothing new since the first's snapshot: %v", err)
	}
	if err := c.Backup(again); err == nil {
		t.Fatal("a backup wrote over an existing directory")
	}
	populate(t, c, 20, 5) // After the backup: not in it.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	r := diskCluster(t, backup, false)
	defer r.Close()
	if r.VerifierKey() != vkey {
		t.Error("the restored member has another note key")
	}
	if got := snapshotBytes(t, r.fsm); !bytes.Equal(got, want) {
		t.Fatal("the restored member's state is not the state at the backup")
	}
	if h, _ := r.Head(ctx); !bytes.Equal(h, head) {
		t.Errorf("restored tree head:\n%s\nwant\n%s", h, head)
	}
	for _, s := range ss {
		if _, err := r.Lookup(ctx, s.name); err != nil {
			t.Errorf("Lookup(%s) on the restored member: %v", s.name, err)
		}
	}
	if got, err := r.Lookup(ctx, ann); err != nil || !sameRecord(got, v1) {
		t.Fatalf("Lookup(ann) on the restored member = %+v, %v", got, err)
	}
	populate(t, r, 100, 3) // It takes records.
}

// A member of three, backed up and then lost, restored on a new directory
// rejoins the cluster as the same member and catches up with what was
// registered after its backup.
func TestBackupRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("three members over TCP")
	}
	ctx := ctxT(t)
	ms := openMembers(t, 3, true)
	l := leaderOf(t, ms)
	populate(t, l.c, 0, 10)
	var m *member
	for _, o := range ms {
		if o != l {
			m = o
			break
		}
	}
	backup := t.TempDir()
	if err := m.c.Backup(filepath.Join(backup, "raft")); err != nil {
		t.Fatal(err)
	}
	m.c.Close()
	after := populate(t, l.c, 10, 5) // While the member is gone.
	m.cfg.Dir = backup
	reopen(t, m)
	for _, s := range after {
		eventually(t, m.id+" has "+string(s.name)+", registered after its backup", func() bool {
			_, err := m.c.Lookup(ctx, s.name)
			return err == nil
		})
	}
	if f := m.c.raft.GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != 3 {
		t.Fatalf("the restored member's configuration: %v", f.Configuration())
	}
}
