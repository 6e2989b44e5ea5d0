package keyraft

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// Batching. Registrations that arrive together share one Raft log entry,
// so one Raft apply and one fsync of the log on each member: Put hands its
// checked record to the member's batcher, which proposes whatever records
// are waiting as one cmdBatch entry and, without waiting for it to commit,
// starts gathering the next. While the leader writes one batch to disk the
// next one fills, so the batch grows with the load and the disk's latency
// and a lone Put is proposed at once.

// Limits on one batch.
const (
	MaxBatch      = 512     // Records in one batch entry.
	maxBatchBytes = 1 << 20 // Bytes of records in one batch entry, unless one record alone is larger.
	putQueueLen   = 4 * MaxBatch
	maxInFlight   = 2 // Batches proposed and not yet applied on this member.
)

// putReq is a record waiting in the batcher, and where its outcome goes.
type putReq struct {
	name  spindle.UserName
	enc   []byte            // EncodeRecord or EncodeChange.
	grant spindle.Signature // Domain admin's countersignature, or nil.
	done  chan error        // Buffered; receives one value.
}

// A batchItem is one leaf proposed in a batch: a record, with the domain
// admin's countersignature under the domain policy, or a config change.
type batchItem struct {
	enc   []byte
	grant spindle.Signature
}

// decodedItem is a batchItem decoded: exactly one of u and ch is set.
type decodedItem struct {
	u     *spindle.User
	enc   []byte // EncodeRecord(u), a copy that the item owns.
	ch    *keylog.Change
	grant spindle.Signature
}

// encodeBatch returns the Raft command for a batch: cmdBatch, the count as
// a uvarint, and for each item its encoding and its countersignature
// (empty if none), each prefixed by its length.
func encodeBatch(items []batchItem) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, it := range items {
		n += 2*binary.MaxVarintLen64 + len(it.enc) + len(it.grant)
	}
	b := make([]byte, 0, n)
	b = append(b, cmdBatch)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendString(b, string(it.enc))
		b = appendString(b, string(it.grant))
	}
	return b
}

// decodeBatch decodes the command made by encodeBatch, checking each
// record as DecodeRecord does and each change as DecodeChange does. A
// batch must hold between 1 and MaxBatch items and nothing else, and only
// a record may carry a countersignature; every failure is Invalid. It is
// safe on untrusted input.
func decodeBatch(data []byte) ([]decodedItem, error) {
	const op spindle.Op = "keyraft.decodeBatch"
	if len(data) == 0 || data[0] != cmdBatch {
		return nil, spindle.E(op, spindle.Invalid, "malformed batch: not a batch command")
	}
	d := keylog.NewDecoder(data[1:])
	n := d.Uvarint()
	if d.Err() == nil && (n == 0 || n > MaxBatch) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("malformed batch: %d items, want 1 to %d", n, MaxBatch))
	}
	items := make([]decodedItem, 0, min(n, 64))
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		enc := d.Bytes(keylog.MaxRecordSize)
		grant := d.Bytes(keylog.MaxSignatureLen)
		if d.Err() != nil {
			break
		}
		var it decodedItem
		var err error
		if keylog.IsChange(enc) {
			it.ch, err = keylog.DecodeChange(enc)
			if err == nil && len(grant) != 0 {
				err = spindle.E(spindle.Invalid, "a config change carries a countersignature")
			}
		} else {
			it.enc = bytes.Clone(enc)
			it.u, err = keylog.DecodeRecord(it.enc)
		}
		if err != nil {
			return nil, spindle.E(op, fmt.Errorf("batch item %d: %w", i, err))
		}
		if len(grant) != 0 {
			it.grant = spindle.Signature(grant)
		}
		items = append(items, it)
	}
	if err := d.Finish(); err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed batch: %w", err))
	}
	return items, nil
}

// batchResult is the response of Apply to a batch: one outcome per record,
// in order, each an applied or an error.
type batchResult []any

// batcher gathers records from putq into batches and proposes them until
// quit is closed. It runs in its own goroutine from Open to Close.
func (c *Cluster) batcher() {
	defer close(c.batcherDone)
	var batch []*putReq
	for {
		batch = batch[:0]
		select {
		case r := <-c.putq:
			batch = append(batch, r)
		case <-c.quit:
			c.drainQueue()
			return
		}
		// Wait for a free proposal slot, and meanwhile let the batch
		// fill: a proposal costs the leader an fsync, so few large ones
		// beat many small ones.
		select {
		case c.inflight <- struct{}{}:
		case <-c.quit:
			batch[0].done <- spindle.E(spindle.Transient, batch[0].name, "key cluster member is shutting down; the record was not proposed")
			c.drainQueue()
			return
		}
		size := len(batch[0].enc)
	gather:
		for len(batch) < MaxBatch && size < maxBatchBytes {
			select {
			case r := <-c.putq:
				batch = append(batch, r)
				size += len(r.enc)
			default:
				break gather
			}
		}
		if h := c.cfg.proposeHook; h != nil {
			h(len(batch))
		}
		c.propose(batch)
	}
}

// propose submits one batch to Raft and, in another goroutine, hands each
// waiting Put its outcome.
func (c *Cluster) propose(batch []*putReq) {
	recs := make([]batchItem, len(batch))
	for i, r := range batch {
		recs[i] = batchItem{enc: r.enc, grant: r.grant}
	}
	reqs := append([]*putReq(nil), batch...)
	f := c.raft.Apply(encodeBatch(recs), c.cfg.ApplyTimeout)
	c.proposals.Add(1)
	go func() {
		defer c.proposals.Done()
		err := f.Error()
		<-c.inflight
		var res batchResult
		if err == nil {
			switch v := f.Response().(type) {
			case batchResult:
				res = v
			case error:
				err = v
			default:
				err = spindle.E(spindle.Internal, fmt.Sprintf("batch apply answered %T", v))
			}
		}
		if err == nil && len(res) != len(reqs) {
			err = spindle.E(spindle.Internal, fmt.Sprintf("batch of %d records answered with %d outcomes", len(reqs), len(res)))
		}
		for i, r := range reqs {
			switch {
			case err != nil:
				r.done <- raftError("keyraft.Put", r.name, err)
			default:
				e, _ := res[i].(error)
				r.done <- e
			}
		}
	}()
}

// drainQueue answers every Put still queued when the member closes.
func (c *Cluster) drainQueue() {
	for {
		select {
		case r := <-c.putq:
			r.done <- spindle.E(spindle.Transient, r.name, "key cluster member is shutting down; the record was not proposed")
		default:
			return
		}
	}
}

// submit queues a checked record for the batcher and waits for its
// outcome, bounded by ctx and the apply timeout.
func (c *Cluster) submit(ctx context.Context, r *putReq) error {
	r.done = make(chan error, 1)
	name := r.name
	timer := time.NewTimer(c.cfg.ApplyTimeout + time.Second)
	defer timer.Stop()
	select {
	case c.putq <- r:
	case <-c.quit:
		return spindle.E(spindle.Transient, name, "key cluster member is shutting down")
	case <-ctx.Done():
		return spindle.E(spindle.Transient, name, fmt.Errorf("%w: %w", errOutcomeUnknown, ctx.Err()))
	case <-timer.C:
		return spindle.E(spindle.Transient, name, fmt.Errorf("%w: the batch queue stayed full for %v", errOutcomeUnknown, c.cfg.ApplyTimeout))
	}
	select {
	case err := <-r.done:
		return err
	case <-c.batcherDone:
		select {
		case err := <-r.done:
			return err
		default:
			return spindle.E(spindle.Transient, name, fmt.Errorf("%w: key cluster member shut down", errOutcomeUnknown))
		}
	case <-ctx.Done():
		return spindle.E(spindle.Transient, name, fmt.Errorf("%w: %w", errOutcomeUnknown, ctx.Err()))
	case <-timer.C:
		return spindle.E(spindle.Transient, name, fmt.Errorf("%w: no answer from raft within %v", errOutcomeUnknown, c.cfg.ApplyTimeout))
	}
}

// appendString appends s to b, prefixed by its length as a uvarint, as the
// encodings of package keylog do.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
