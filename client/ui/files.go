package ui

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"spindle.dev"
	"spindle.dev/node/media"
)

// file serves a file's bytes, with range requests, straight from the
// client's File: blocks are fetched, verified and decrypted as they are
// sent, so a file of any size streams. With ?at=SEQ it serves the file
// as it was after that entry of the owner's log.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		s.badName(w, r, err)
		return
	}
	var f spindle.File
	if r.URL.Query().Has("at") {
		f, err = s.pastFile(r, p)
	} else {
		f, err = s.c.Open(r.Context(), p.Path())
	}
	if err != nil {
		s.fail(w, r, p, err)
		return
	}
	defer f.Close()
	name := p.Last()
	ctype := media.Type(name)
	h := w.Header()
	// A file may be anything its writer put: it must not run scripts in
	// the app's origin, so it is sandboxed, and shown inline only if it
	// is a kind a browser shows without running anything.
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'")
	inline := mediaKind(name) != "" && mediaKind(name) != "image" || inlineImage(ctype) || strings.HasPrefix(ctype, "text/plain") || ctype == "application/pdf"
	if ctype == "" || !inline {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	disp := "inline"
	if !inline || r.URL.Query().Get("dl") != "" {
		disp = "attachment"
	}
	h.Set("Content-Disposition", mime.FormatMediaType(disp, map[string]string{"filename": name}))
	h.Set("Cache-Control", "private, no-cache")
	http.ServeContent(w, r, "", f.Entry().Time.Go(), f)
}

// inlineImage reports whether ctype is a picture a browser shows without
// running anything (not SVG, which may hold scripts).
func inlineImage(ctype string) bool {
	switch ctype {
	case "image/jpeg", "image/png", "image/gif", "image/webp", "image/bmp":
		return true
	}
	return false
}

// reply answers an API request: with v as JSON, or with err in words.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		s.log.Info("ui: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		pr := explain(err)
		w.WriteHeader(pr.Status)
		json.NewEncoder(w).Encode(map[string]string{"error": pr.Title + ": " + pr.Detail, "text": pr.Text})
		return
	}
	if v == nil {
		v = map[string]bool{"ok": true}
	}
	json.NewEncoder(w).Encode(v)
}

// formName returns the clean name in the form (or query) value key.
func formName(r *http.Request, key string) (spindle.PathName, error) {
	v := r.FormValue(key)
	if v == "" {
		return "", spindle.E(spindle.Invalid, "no "+key+" given")
	}
	return spindle.Clean(spindle.PathName(v))
}

// put stores the request body as the file ?name=, streaming it to the
// client's Put. With ?parents=1 it first makes the folders above the
// file that do not exist yet (an uploaded folder).
func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	// The name comes in the query: the body is the file, unread.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.reply(w, r, nil, spindle.E(spindle.Invalid, err))
		return
	}
	name, err := spindle.Clean(spindle.PathName(q.Get("name")))
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	if q.Get("parents") != "" {
		if err := s.makeParents(r, name); err != nil {
			s.reply(w, r, nil, err)
			return
		}
	}
	e, err := s.c.Put(r.Context(), name, r.Body, spindle.UnknownPack, nil)
	if e == nil {
		s.reply(w, r, nil, err)
		return
	}
	resp := map[string]any{"name": e.Name, "size": e.Size}
	var warn *spindle.Warning
	if errors.As(err, &warn) {
		resp["warning"] = oneLine(warn.Error())
	}
	s.reply(w, r, resp, nil)
}

// makeParents makes the folders above name that do not exist.
func (s *Server) makeParents(r *http.Request, name spindle.PathName) error {
	p, err := spindle.Parse(name)
	if err != nil {
		return err
	}
	for i := 1; i < p.NElem(); i++ {
		dir := p.First(i).Path()
		_, err := s.c.Lookup(r.Context(), dir, true)
		if errors.Is(err, spindle.NotExist) {
			_, err = s.c.MakeDirectory(r.Context(), dir)
			if errors.Is(err, spindle.Exist) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	name, err := formName(r, "name")
	if err == nil {
		_, err = s.c.MakeDirectory(r.Context(), name)
	}
	s.reply(w, r, nil, err)
}

func (s *Server) rename(w http.ResponseWriter, r *http.Request) {
	old, err := formName(r, "old")
	var new spindle.PathName
	if err == nil {
		new, err = formName(r, "new")
	}
	if err == nil {
		err = s.c.Rename(r.Context(), old, new)
	}
	s.reply(w, r, nil, err)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	name, err := formName(r, "name")
	if err == nil {
		err = s.c.Delete(r.Context(), name)
	}
	s.reply(w, r, nil, err)
}

func (s *Server) link(w http.ResponseWriter, r *http.Request) {
	target, err := formName(r, "target")
	var name spindle.PathName
	if err == nil {
		name, err = formName(r, "name")
	}
	if err == nil {
		_, err = s.c.PutLink(r.Context(), target, name)
	}
	s.reply(w, r, nil, err)
}
