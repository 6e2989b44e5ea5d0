package client

import (
	"context"
	"strings"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// call sends req, a request of any method, as the client sends its own:
// a read about a tree to the tree's dir hosts, the rest to the client's
// node. It returns the answer as any method's.
func (r *remote) call(ctx context.Context, req *wiretest.Request) (*wiretest.Response, error) {
	var name string
	switch req.Method {
	case wire.DirHead, wire.DirEntries, wire.DirCheckpoint:
		name = string(req.User)
	case wire.DirLookup, wire.DirWhich:
		name = string(req.Name)
	case wire.DirGlob:
		name = req.Pattern
	}
	owner, _, _ := strings.Cut(name, "/")
	v, err := r.callFor(ctx, req.Envelope(), spindle.UserName(owner), func(resp *wire.Response, err error) (any, error) {
		b, eerr := wire.Encode(resp)
		if eerr != nil {
			return nil, eerr
		}
		var any wiretest.Response
		if derr := wire.Decode(b, &any); derr != nil {
			return nil, derr
		}
		return &any, err
	})
	resp, _ := v.(*wiretest.Response)
	return resp, err
}
