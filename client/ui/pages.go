package ui

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"path"
	"slices"
	"strings"

	"spindle.dev"
)

// funcs returns the template functions of an app whose addresses start
// with base.
func funcs(base string) template.FuncMap {
	return template.FuncMap{
		"base":        func() string { return base },
		"browseURL":   func(n spindle.PathName) string { return base + browseURL(n) },
		"fileURL":     func(n spindle.PathName) string { return base + "/f/" + escapePath(n) },
		"thumbURL":    func(n spindle.PathName) string { return base + "/t/" + escapePath(n) },
		"viewURL":     func(n spindle.PathName) string { return base + "/v/" + escapePath(n) },
		"shareURL":    func(n spindle.PathName) string { return base + "/share/" + escapePath(n) },
		"versionsURL": func(n spindle.PathName) string { return base + "/versions/" + escapePath(n) },
		"deletedURL":  func(n spindle.PathName) string { return base + "/deleted/" + escapePath(n) },
		"relName":     relName,
		"baseName":    baseName,
		"owner": func(n spindle.PathName) spindle.UserName {
			u, _, _ := strings.Cut(string(n), "/")
			return spindle.UserName(u)
		},
		"size": humanSize,
		"when": func(t spindle.Time) string { return t.Go().Local().Format("2006-01-02 15:04") },
	}
}

// A crumb is one step of the breadcrumbs.
type crumb struct {
	Name string
	Path spindle.PathName
}

// page is what every page template gets.
type page struct {
	Title   string
	User    spindle.UserName
	Path    spindle.PathName // Of what the page shows.
	Crumbs  []crumb
	Problem *problem
	Data    any
}

// A row is one entry in a folder listing.
type row struct {
	Name   string
	Path   spindle.PathName
	Dir    bool
	Link   bool
	Target spindle.PathName
	Image  bool
	Media  string // "image", "video", "audio" or "".
	Size   int64
	Time   spindle.Time
	Writer spindle.UserName
}

func (s *Server) newPage(title string, p spindle.Parsed) *page {
	pg := &page{Title: title, User: s.user, Path: p.Path()}
	root := spindle.PathName(string(p.User()) + "/")
	pg.Crumbs = append(pg.Crumbs, crumb{Name: string(p.User()), Path: root})
	for i := 1; i <= p.NElem(); i++ {
		q := p.First(i)
		pg.Crumbs = append(pg.Crumbs, crumb{Name: q.Last(), Path: q.Path()})
	}
	return pg
}

// render executes the template name into w, buffered, so that a failure
// halfway sends an error rather than half a page.
func (s *Server) render(w http.ResponseWriter, status int, name string, pg *page) {
	var b bytes.Buffer
	if err := s.pages.ExecuteTemplate(&b, name, pg); err != nil {
		s.log.Error("ui: template", "name", name, "err", err)
		http.Error(w, "the page could not be made: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; media-src 'self'; object-src 'none'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail shows err in words on a page about p.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, p spindle.Parsed, err error) {
	s.log.Info("ui: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	pr := explain(err)
	pg := s.newPage(pr.Title, p)
	pg.Problem = &pr
	s.render(w, pr.Status, "problem.html", pg)
}

// badName answers a request whose name does not parse.
func (s *Server) badName(w http.ResponseWriter, r *http.Request, err error) {
	p, _ := spindle.Parse(spindle.PathName(string(s.user) + "/"))
	s.fail(w, r, p, err)
}

// list returns the entries of the directory p, folders first, then by name.
func (s *Server) list(r *http.Request, p spindle.Parsed) ([]row, error) {
	pattern := spindle.GlobEscape(string(p.Path()))
	if !strings.HasSuffix(pattern, "/") {
		pattern += "/"
	}
	es, err := s.c.Glob(r.Context(), pattern+"*")
	if err != nil {
		return nil, err
	}
	rows := make([]row, 0, len(es))
	for _, e := range es {
		rw := row{
			Name:   path.Base(string(e.Name)),
			Path:   e.Name,
			Dir:    e.Attr.IsDir(),
			Link:   e.Attr.IsLink(),
			Target: e.Link,
			Size:   e.Size,
			Time:   e.Time,
			Writer: e.Writer,
		}
		if !rw.Dir && !rw.Link {
			rw.Media = mediaKind(rw.Name)
			rw.Image = rw.Media == "image" && e.Size <= maxThumbSource
		}
		rows = append(rows, rw)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		if a.Dir != b.Dir {
			if a.Dir {
				return -1
			}
			return 1
		}
		if c := strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return rows, nil
}

type browseData struct {
	Rows   []row
	Images int
	Own    bool // The user's own tree: offer upload and the rest.
}

func (s *Server) browse(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	if !p.IsRoot() {
		e, err := s.c.Lookup(r.Context(), p.Path(), true)
		if err != nil {
			s.fail(w, r, p, err)
			return
		}
		if !e.Attr.IsDir() {
			http.Redirect(w, r, s.base+"/v/"+escapePath(p.Path()), http.StatusSeeOther)
			return
		}
	}
	rows, err := s.list(r, p)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	d := &browseData{Rows: rows, Own: p.User() == s.user}
	for _, rw := range rows {
		if rw.Image {
			d.Images++
		}
	}
	pg := s.newPage(string(p.Path()), p)
	pg.Data = d
	s.render(w, http.StatusOK, "browse.html", pg)
}

type viewerData struct {
	Entry      row
	Prev, Next spindle.PathName
	Index, Of  int
}

func (s *Server) viewer(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	e, err := s.c.Lookup(r.Context(), p.Path(), true)
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	if e.Attr.IsDir() {
		http.Redirect(w, r, s.base+browseURL(p.Path()), http.StatusSeeOther)
		return
	}
	d := &viewerData{Entry: row{
		Name: p.Last(), Path: p.Path(), Size: e.Size, Time: e.Time, Writer: e.Writer,
		Media: mediaKind(p.Last()),
	}}
	// Step through the pictures and videos of the folder. A folder that
	// cannot be listed leaves a viewer of this one file.
	if rows, err := s.list(r, p.Dir()); err == nil {
		var media []row
		for _, rw := range rows {
			if rw.Media == "image" || rw.Media == "video" {
				media = append(media, rw)
			}
		}
		for i, rw := range media {
			if rw.Path == p.Path() {
				d.Index, d.Of = i+1, len(media)
				if i > 0 {
					d.Prev = media[i-1].Path
				}
				if i+1 < len(media) {
					d.Next = media[i+1].Path
				}
			}
		}
	}
	pg := s.newPage(p.Last(), p)
	pg.Data = d
	s.render(w, http.StatusOK, "viewer.html", pg)
}

// mediaKind says from its name how a file can be shown.
func mediaKind(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp":
		return "image"
	case ".mp4", ".webm", ".m4v", ".mov", ".ogv":
		return "video"
	case ".mp3", ".ogg", ".oga", ".wav", ".m4a", ".flac", ".opus":
		return "audio"
	}
	return ""
}

func humanSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
