package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"spindle.dev"
	"spindle.dev/access"
)

// The share dialog edits the Access file of a folder: one row per person,
// group or wildcard it names, with a checkbox per right. Saving writes
// the whole file, one line per row, through the client's Put, which
// re-wraps the keys of the files it governs as "spin put" of an Access
// file does.

var rights = [...]access.Right{access.Read, access.Write, access.List, access.Create, access.Delete}

// A grant is one row of the dialog: who, and which rights.
type grant struct {
	Who    string
	Rights [len(rights)]bool
	Group  bool               // Who is a group.
	Member []spindle.UserName // A group's members, expanded.
	Note   string             // Why the members are unknown.
}

// A person is a user (or all, or *@domain) with the rights they end up
// with, groups expanded.
type person struct {
	Who    spindle.UserName
	Rights [len(rights)]bool
}

type shareData struct {
	Target    spindle.PathName // What the dialog was opened on.
	Dir       spindle.PathName // The folder whose Access file it edits.
	Governing spindle.PathName // The Access file that governs Target now; empty if none.
	Writes    spindle.PathName // The Access file saving writes.
	Text      string           // The governing file's text.
	Grants    []grant
	People    []person
	Unknown   []string // Groups whose members could not be read.
	Missing   []missing
	MissingOK bool // The key check ran.
	CanEdit   bool
	Saved     bool
	Fixed     int
	FixRan    bool // Fixed holds the outcome of a fix.
	Warning   string
	Rights    []string
}

// missing is a file some readers hold no key to.
type missing struct {
	Name  spindle.PathName
	Users []spindle.UserName
}

func (s *Server) sharePage(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	d, err := s.shareState(r, p)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	q := r.URL.Query()
	d.Saved = q.Get("saved") != ""
	d.Warning = q.Get("warning")
	d.Fixed, _ = strconv.Atoi(q.Get("fixed"))
	d.FixRan = q.Has("fixed")
	pg := s.newPage("Share "+string(p.Path()), p)
	pg.Data = d
	s.render(w, http.StatusOK, "share.html", pg)
}

// shareState works out what the dialog shows for p.
func (s *Server) shareState(r *http.Request, p spindle.Parsed) (*shareData, error) {
	ctx := r.Context()
	dir, err := s.shareDir(ctx, p)
	if err != nil {
		return nil, err
	}
	d := &shareData{
		Target:  p.Path(),
		Dir:     dir.Path(),
		Writes:  accessPath(dir),
		CanEdit: p.User() == s.user,
	}
	for _, rt := range rights {
		d.Rights = append(d.Rights, rt.String())
	}
	ae, err := s.c.WhichAccess(ctx, p.Path())
	if err != nil {
		return nil, err
	}
	var a *access.Access
	if ae == nil {
		// No Access file: the owner alone has every right.
		a = access.New(d.Writes)
		all := grant{Who: string(p.User())}
		for i := range all.Rights {
			all.Rights[i] = true
		}
		d.Grants = []grant{all}
	} else {
		d.Governing = ae.Name
		text := ae.Inline
		if len(text) == 0 && ae.Size > 0 {
			if text, err = s.readAll(r, ae.Name); err != nil {
				return nil, err
			}
		}
		d.Text = string(text)
		if a, err = access.Parse(ae.Name, text); err != nil {
			return nil, err
		}
		if d.Grants, err = parseGrants(d.Text); err != nil {
			return nil, err
		}
	}
	load := s.groupLoader(r)
	people := map[spindle.UserName]*person{}
	unknown := map[string]bool{}
	for i, rt := range rights {
		users, failed, err := a.KnownUsers(rt, load)
		if err != nil {
			return nil, err
		}
		for _, f := range failed {
			unknown[oneLine(f.Error())] = true
		}
		for _, u := range users {
			if people[u] == nil {
				people[u] = &person{Who: u}
			}
			people[u].Rights[i] = true
		}
	}
	for _, pp := range people {
		d.People = append(d.People, *pp)
	}
	slices.SortFunc(d.People, func(a, b person) int { return strings.Compare(string(a.Who), string(b.Who)) })
	for u := range unknown {
		d.Unknown = append(d.Unknown, u)
	}
	slices.Sort(d.Unknown)
	for i := range d.Grants {
		g := &d.Grants[i]
		if !isGroup(g.Who) {
			continue
		}
		g.Group = true
		ga, err := access.Parse(d.Writes, []byte("r: "+g.Who+"\n"))
		if err != nil {
			g.Note = oneLine(err.Error())
			continue
		}
		users, failed, err := ga.KnownUsers(access.Read, load)
		if err == nil && len(failed) > 0 {
			err = failed[0]
		}
		if err != nil {
			g.Note = explain(err).Title + ": " + oneLine(err.Error())
		}
		g.Member = slices.DeleteFunc(users, func(u spindle.UserName) bool { return u == ga.Owner() })
	}
	if d.CanEdit {
		reports, err := s.c.Share(ctx, dir.Path(), true, false)
		if err == nil {
			d.MissingOK = true
		}
		for _, rep := range reports {
			if len(rep.Missing) > 0 {
				d.Missing = append(d.Missing, missing{Name: rep.Name, Users: rep.Missing})
			}
		}
	}
	return d, nil
}

// groupLoader reads Group files through the client.
func (s *Server) groupLoader(r *http.Request) access.GroupLoader {
	return func(name spindle.PathName) (*access.Group, error) {
		data, err := s.readAll(r, name)
		if err != nil {
			return nil, err
		}
		return access.ParseGroup(name, data)
	}
}

// readAll reads a small file: an Access or Group file.
func (s *Server) readAll(r *http.Request, name spindle.PathName) ([]byte, error) {
	f, err := s.c.Open(r.Context(), name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

func accessPath(dir spindle.Parsed) spindle.PathName {
	q, err := dir.Join("Access")
	if err != nil {
		return spindle.PathName(strings.TrimSuffix(string(dir.Path()), "/") + "/Access")
	}
	return q.Path()
}

// isGroup reports whether who, as an Access file writes it, is a group.
func isGroup(who string) bool {
	return who != "all" && !strings.HasPrefix(who, "*@") && (strings.Contains(who, "/") || !strings.Contains(who, "@"))
}

// parseGrants reads the rows of an Access file's text: who has which
// rights, as written (groups not expanded). The text must already have
// parsed with access.Parse.
func parseGrants(text string) ([]grant, error) {
	var out []grant
	index := map[string]int{}
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		rs, who, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: no colon", n+1)
		}
		var have [len(rights)]bool
		for _, rt := range strings.FieldsFunc(rs, splitList) {
			rt = strings.ToLower(rt)
			if rt == "*" {
				for i := range have {
					have[i] = true
				}
				continue
			}
			found := false
			for i, r := range rights {
				if rt == r.String() || rt == r.String()[:1] {
					have[i], found = true, true
				}
			}
			if !found {
				return nil, fmt.Errorf("line %d: unknown right %q", n+1, rt)
			}
		}
		for _, u := range strings.FieldsFunc(who, splitList) {
			if strings.EqualFold(u, "all") || u == string(spindle.AllUsers) {
				u = "all"
			}
			i, ok := index[u]
			if !ok {
				i = len(out)
				index[u] = i
				out = append(out, grant{Who: u})
			}
			for k := range have {
				out[i].Rights[k] = out[i].Rights[k] || have[k]
			}
		}
	}
	return out, nil
}

func splitList(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }

// grantsText writes grants as an Access file: one line per row.
func grantsText(gs []grant) string {
	var b strings.Builder
	b.WriteString("# Written by spin ui's share dialog.\n")
	for _, g := range gs {
		var rs []string
		for i, on := range g.Rights {
			if on {
				rs = append(rs, rights[i].String())
			}
		}
		if len(rs) > 0 {
			fmt.Fprintf(&b, "%s: %s\n", strings.Join(rs, ", "), g.Who)
		}
	}
	return b.String()
}

// shareDir returns the folder whose sharing the dialog for p shows: p, or
// the folder of p if it is a file.
func (s *Server) shareDir(ctx context.Context, p spindle.Parsed) (spindle.Parsed, error) {
	if p.IsRoot() {
		return p, nil
	}
	e, err := s.c.Lookup(ctx, p.Path(), true)
	if err != nil {
		return spindle.Parsed{}, err
	}
	if !e.Attr.IsDir() {
		return p.Dir(), nil
	}
	return p, nil
}

// share saves the dialog: the rows posted become the folder's Access file.
func (s *Server) share(w http.ResponseWriter, r *http.Request) {
	name, err := formName(r, "name")
	var p spindle.Parsed
	if err == nil {
		p, err = spindle.Parse(name)
	}
	if err != nil {
		s.badName(w, r, err)
		return
	}
	if p.User() != s.user {
		s.fail(w, r, p, spindle.E(p.Path(), spindle.Permission, "only the owner may change who a folder is shared with"))
		return
	}
	// Only the Access file to write is needed here, not the dialog's
	// whole state (which checks every file under the folder for keys).
	dir, err := s.shareDir(r.Context(), p)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	writes := accessPath(dir)
	rows, _ := strconv.Atoi(r.PostFormValue("rows"))
	var gs []grant
	seen := map[string]bool{}
	add := func(who, suffix string) {
		who = strings.TrimSpace(who)
		if who == "" || seen[who] {
			return
		}
		seen[who] = true
		g := grant{Who: who}
		for i, rt := range rights {
			g.Rights[i] = r.PostFormValue(rt.String()[:1]+suffix) != ""
		}
		gs = append(gs, g)
	}
	for i := 0; i < rows && i < 10000; i++ {
		add(r.PostFormValue("who"+strconv.Itoa(i)), strconv.Itoa(i))
	}
	add(r.PostFormValue("whonew"), "new")
	text := grantsText(gs)
	if err := access.Check(writes, []byte(text)); err != nil {
		s.fail(w, r, p, err)
		return
	}
	_, err = s.c.Put(r.Context(), writes, strings.NewReader(text), spindle.UnknownPack, nil)
	var warn *spindle.Warning
	if err != nil && !errors.As(err, &warn) {
		s.fail(w, r, p, err)
		return
	}
	q := url.Values{"saved": {"1"}}
	if warn != nil {
		q.Set("warning", oneLine(warn.Error()))
	}
	http.Redirect(w, r, s.base+"/share/"+escapePath(p.Path())+"?"+q.Encode(), http.StatusSeeOther)
}

// fix gives keys to the readers who lack them, under the folder posted.
func (s *Server) fix(w http.ResponseWriter, r *http.Request) {
	name, err := formName(r, "name")
	var p spindle.Parsed
	if err == nil {
		p, err = spindle.Parse(name)
	}
	if err != nil {
		s.badName(w, r, err)
		return
	}
	dir := p
	if e, err := s.c.Lookup(r.Context(), p.Path(), true); err == nil && !e.Attr.IsDir() {
		dir = p.Dir()
	}
	reports, err := s.c.Share(r.Context(), dir.Path(), true, true)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	fixed := 0
	for _, rep := range reports {
		if rep.Fixed {
			fixed++
		}
	}
	http.Redirect(w, r, s.base+"/share/"+escapePath(p.Path())+"?fixed="+strconv.Itoa(fixed), http.StatusSeeOther)
}
