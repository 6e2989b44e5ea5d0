// Package media names the content type of a file from its name, for the
// two places that hand files to browsers: the gateway and spin ui. It
// knows the pictures, video, audio and text a browser shows by itself,
// whatever the system's MIME table holds, and asks that table for the
// rest.
package media

import (
	"mime"
	"path"
	"strings"
)

var types = map[string]string{
	".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime",
	".webm": "video/webm", ".ogv": "video/ogg", ".mp3": "audio/mpeg",
	".ogg": "audio/ogg", ".oga": "audio/ogg", ".opus": "audio/ogg",
	".wav": "audio/wav", ".m4a": "audio/mp4", ".flac": "audio/flac",
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
	".gif": "image/gif", ".webp": "image/webp", ".bmp": "image/bmp",
	".txt": "text/plain; charset=utf-8", ".pdf": "application/pdf",
}

// Type returns the content type of the file name by its extension, or ""
// if it is not known.
func Type(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := types[ext]; ok {
		return t
	}
	return mime.TypeByExtension(ext)
}
