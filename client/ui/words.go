package ui

import (
	"errors"
	"net/http"
	"strings"

	"spindle.dev"
)

// A problem is an error said in words: what happened, and what to do.
type problem struct {
	Title  string // "Private"
	Detail string // What it means and what to do.
	Text   string // The error itself, for the curious.
	Status int    // HTTP status.
}

// explain turns err into a problem for people who do not read error
// messages.
func explain(err error) problem {
	p := problem{Text: oneLine(err.Error()), Status: http.StatusInternalServerError}
	var w *spindle.Warning
	switch {
	case errors.As(err, &w):
		p.Title, p.Status = "Done, with a warning", http.StatusOK
		p.Detail = "What you asked for was done, but something that follows from it could not be: see below."
	case errors.Is(err, spindle.Private):
		p.Title, p.Status = "Private", http.StatusForbidden
		p.Detail = "This is private: its owner has not shared it with you, or it does not exist (Spindle does not say which to people it is not shared with). Ask its owner to share it with you."
	case errors.Is(err, spindle.Permission):
		p.Title, p.Status = "Not allowed", http.StatusForbidden
		p.Detail = "You may see this, but not do that here. Ask the owner to give you the right in the Share dialog."
	case errors.Is(err, spindle.NotExist):
		p.Title, p.Status = "Not found", http.StatusNotFound
		p.Detail = "There is nothing by this name. Check the spelling, or go up a folder and look."
	case errors.Is(err, spindle.Exist):
		p.Title, p.Status = "Already there", http.StatusConflict
		p.Detail = "Something by that name is there already. Choose another name, or delete the old one first."
	case errors.Is(err, spindle.NotEmpty):
		p.Title, p.Status = "Folder not empty", http.StatusConflict
		p.Detail = "Only an empty folder can be deleted. Delete what is in it first."
	case errors.Is(err, spindle.Invalid):
		p.Title, p.Status = "Not a valid request", http.StatusBadRequest
		p.Detail = "Something in the name or the request is not allowed. Names are user@domain/folder/file."
	case errors.Is(err, spindle.CannotDecrypt):
		p.Title, p.Status = "No key for you yet", http.StatusForbidden
		p.Detail = "You may read this file, but its owner has not yet given you its key. Ask the owner to open the Share dialog and press \"Give them keys\"."
	case errors.Is(err, spindle.Integrity):
		p.Title, p.Status = "Damaged or forged", http.StatusBadGateway
		p.Detail = "What came back failed its signature or hash check, so it was not shown. Try again later; if it persists, tell the owner."
	case errors.Is(err, spindle.Transient), errors.Is(err, spindle.IO):
		p.Title, p.Status = "Could not reach the network", http.StatusServiceUnavailable
		p.Detail = "The node did not answer in time. Check that spin node is running, then reload."
	case errors.Is(err, spindle.Damaged):
		p.Title, p.Status = "Damaged on the node", http.StatusServiceUnavailable
		p.Detail = "The node that keeps this tree has damaged state; its operator must repair it (spin node -repair)."
	default:
		p.Title = "Something went wrong"
		p.Detail = "The request failed. The message below says why."
	}
	return p
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
