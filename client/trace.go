package client

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"spindle.dev"
	"spindle.dev/node/wire"
)

// What a client logs at debug level (spin -log debug), to stderr through
// Config.Logger: each request to the node with what it named, the bytes
// each way and how long the answer took; each block stored or fetched;
// each directory log head and key record checked. Nothing is logged at
// higher levels on the way, so a client is quiet by default.

// debugOn reports whether log takes debug messages; callers check it
// before doing any work for one.
func debugOn(log *slog.Logger) bool {
	return log != nil && log.Enabled(context.Background(), slog.LevelDebug)
}

// logCall logs one request to the node and its answer.
func logCall(log *slog.Logger, req *wire.Request, sent, got int, took time.Duration, err error) {
	if !debugOn(log) {
		return
	}
	attrs := []any{"method", req.Method}
	// What the request is about: its body's fields under the keys they
	// have in every method's request (see package wire).
	var about struct {
		User    spindle.UserName `cbor:"2,keyasint,omitempty"`
		Name    spindle.PathName `cbor:"3,keyasint,omitempty"`
		Pattern string           `cbor:"4,keyasint,omitempty"`
		Batch   [][]byte         `cbor:"8,keyasint,omitempty"`
		Blocks  [][]byte         `cbor:"22,keyasint,omitempty"`
	}
	if len(req.Body) > 0 && wire.Decode(req.Body, &about) == nil {
		switch {
		case about.Name != "":
			attrs = append(attrs, "name", about.Name)
		case about.Pattern != "":
			attrs = append(attrs, "pattern", about.Pattern)
		case about.User != "":
			attrs = append(attrs, "user", about.User)
		}
		if len(about.Batch) > 0 {
			attrs = append(attrs, "entries", len(about.Batch))
		}
		if len(about.Blocks) > 0 {
			attrs = append(attrs, "blocks", len(about.Blocks)) // See inline.go.
		}
	}
	attrs = append(attrs, "sent", sent, "got", got, "took", roundDur(took))
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	log.Debug("request", attrs...)
}

// roundDur rounds d for a log line: microseconds are noise.
func roundDur(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// loggedPutter logs each block it stores.
type loggedPutter struct {
	refPutter
	log *slog.Logger
}

func (p loggedPutter) PutRef(ctx context.Context, ref spindle.Ref, data []byte) error {
	start := time.Now()
	err := p.refPutter.PutRef(ctx, ref, data)
	attrs := []any{"ref", ref, "bytes", len(data), "took", roundDur(time.Since(start))}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	p.log.Debug("block put", attrs...)
	return err
}

// putter returns the store a put sends its blocks to.
func (c *Client) putter() refPutter {
	var p refPutter = signingInPutter{c}
	if debugOn(c.log) {
		return loggedPutter{p, c.log}
	}
	return p
}

// A signingInPutter puts blocks through the client's node, signing in
// again once if the node refuses one: a node ends a session when its
// user's key record changes (a rotation, or dir hosts named), and the
// block protocol has no sign-in of its own to ask for one, as the
// client protocol does (wire.SessionOp).
type signingInPutter struct{ c *Client }

func (p signingInPutter) PutRef(ctx context.Context, ref spindle.Ref, data []byte) error {
	err := p.c.blocks.PutRef(ctx, ref, data)
	if !errors.Is(err, spindle.Permission) || p.c.keys == nil {
		return err
	}
	if aerr := p.c.auth(ctx); aerr != nil {
		return err
	}
	return p.c.blocks.PutRef(ctx, ref, data)
}

// fetcher returns the function an open file fetches its blocks with.
func (c *Client) fetcher() func(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	if !debugOn(c.log) {
		return c.get
	}
	return func(ctx context.Context, ref spindle.Ref) ([]byte, error) {
		start := time.Now()
		data, err := c.get(ctx, ref)
		attrs := []any{"ref", ref, "bytes", len(data), "took", roundDur(time.Since(start))}
		if err != nil {
			attrs = append(attrs, "err", err.Error())
		}
		c.log.Debug("block get", attrs...)
		return data, err
	}
}
