package ui

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

// The Versions page lists the log entries that touched a file, each with
// a download of that version and a button that writes it back; the
// Recently deleted page lists what was removed under a folder, each with
// a button that restores it as it was last. Both read the tree's past,
// which only its owner may (see client/versions.go); others get the
// Private page.

// pastClient is what the two pages need of the client; a
// *[client.Client] has it.
type pastClient interface {
	History(ctx context.Context, name spindle.PathName) ([]client.Version, error)
	PastAt(ctx context.Context, seq int64, when time.Time) (*client.Past, error)
	Restore(ctx context.Context, past *client.Past, from, to spindle.PathName) (client.RestoreResult, error)
	Deleted(ctx context.Context, dir spindle.PathName) ([]client.Removed, error)
}

var _ pastClient = (*client.Client)(nil)

// past returns the client as a pastClient.
func (s *Server) past() (pastClient, error) {
	pc, ok := s.c.(pastClient)
	if !ok {
		return nil, spindle.E(spindle.Invalid, "this client cannot read the past")
	}
	return pc, nil
}

// A version is one row of the Versions page.
type version struct {
	client.Version
	What string // What the entry did, in words.
	// Here says that the file was at the page's name after the entry:
	// that version can be downloaded and restored.
	Here bool
}

type versionsData struct {
	Name     spindle.PathName
	Versions []version // Newest first.
	Restored int64     // The sequence just restored, or 0.
}

func (s *Server) versionsPage(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	pc, err := s.past()
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	vs, err := pc.History(r.Context(), p.Path())
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	if len(vs) == 0 {
		s.fail(w, r, p, spindle.E(p.Path(), spindle.NotExist, "no entry of the log touched it"))
		return
	}
	d := &versionsData{Name: p.Path()}
	d.Restored, _ = strconv.ParseInt(r.URL.Query().Get("restored"), 10, 64)
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		rw := version{Version: v}
		switch {
		case v.Op == "rename" && v.NewName == p.Path():
			rw.What, rw.Here = "moved here from "+string(v.Name), true
		case v.Op == "rename":
			rw.What = "moved to " + string(v.NewName)
		case v.Op == "put" && v.Name == p.Path():
			rw.What, rw.Here = "written", true
		case v.Op == "delete" && v.Name == p.Path():
			rw.What = "deleted"
		default:
			rw.What = v.Op + " " + string(v.Name)
		}
		d.Versions = append(d.Versions, rw)
	}
	pg := s.newPage("Versions of "+string(p.Path()), p)
	pg.Data = d
	s.render(w, http.StatusOK, "versions.html", pg)
}

type deletedData struct {
	Dir      spindle.PathName
	Removed  []client.Removed
	Restored spindle.PathName // What was just restored, or "".
	Files    int
}

func (s *Server) deletedPage(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	pc, err := s.past()
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	rs, err := pc.Deleted(r.Context(), p.Path())
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	d := &deletedData{Dir: p.Path(), Removed: rs}
	if n := r.URL.Query().Get("restored"); n != "" {
		if q, err := spindle.Parse(spindle.PathName(n)); err == nil {
			d.Restored = q.Path()
		}
	}
	d.Files, _ = strconv.Atoi(r.URL.Query().Get("files"))
	pg := s.newPage("Recently deleted in "+string(p.Path()), p)
	pg.Data = d
	s.render(w, http.StatusOK, "deleted.html", pg)
}

// restore writes the posted name back as it was at sequence at, and goes
// back to the page the form was on ("then": versions or deleted).
func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	name, err := formName(r, "name")
	var p spindle.Parsed
	if err == nil {
		p, err = spindle.Parse(name)
	}
	if err != nil {
		s.badName(w, r, err)
		return
	}
	seq, err := strconv.ParseInt(r.PostFormValue("at"), 10, 64)
	if err != nil || seq <= 0 {
		s.fail(w, r, p, spindle.E(p.Path(), spindle.Invalid, "no sequence to restore from"))
		return
	}
	pc, past, err := s.pastAt(r, p, seq)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	res, err := pc.Restore(r.Context(), past, p.Path(), p.Path())
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	var q url.Values
	var to string
	if r.PostFormValue("then") == "deleted" {
		q = url.Values{"restored": {string(p.Path())}, "files": {strconv.Itoa(res.Files)}}
		to = "/deleted/" + escapePath(p.Dir().Path())
	} else {
		q = url.Values{"restored": {strconv.FormatInt(seq, 10)}}
		to = "/versions/" + escapePath(p.Path())
	}
	http.Redirect(w, r, s.base+to+"?"+q.Encode(), http.StatusSeeOther)
}

// pastFile opens the file p as it was at the sequence the query's at
// names.
func (s *Server) pastFile(r *http.Request, p spindle.Parsed) (spindle.File, error) {
	seq, err := strconv.ParseInt(r.URL.Query().Get("at"), 10, 64)
	if err != nil || seq <= 0 {
		return nil, spindle.E(p.Path(), spindle.Invalid, "at: want a sequence number")
	}
	_, past, err := s.pastAt(r, p, seq)
	if err != nil {
		return nil, err
	}
	return past.Open(r.Context(), p.Path())
}

// pastAt returns the user's tree as it was after entry seq, to read p in:
// a name of another user's tree is Private without a read, since only
// the owner may read a tree's past.
func (s *Server) pastAt(r *http.Request, p spindle.Parsed, seq int64) (pastClient, *client.Past, error) {
	if p.User() != s.user {
		return nil, nil, spindle.E(p.Path(), spindle.Private, "only the owner may read a tree's past")
	}
	pc, err := s.past()
	if err != nil {
		return nil, nil, err
	}
	past, err := pc.PastAt(r.Context(), seq, time.Time{})
	if err != nil {
		return nil, nil, err
	}
	return pc, past, nil
}

// relName returns name relative to the folder dir, for a listing.
func relName(dir, name spindle.PathName) string {
	return strings.TrimPrefix(strings.TrimPrefix(string(name), strings.TrimSuffix(string(dir), "/")), "/")
}

// baseName returns the last element of name.
func baseName(name spindle.PathName) string { return path.Base(string(name)) }
