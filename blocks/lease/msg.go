package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
)

// MaxDigests bounds the blocks of one lease message (512 KiB of digests).
const MaxDigests = 16384

// MaxMessage bounds an encoded Request or Reply.
const MaxMessage = 64 + 256 + MaxDigests*32

// maxReason bounds the reason of a Reply.
const maxReason = 1024

// msgVersion starts every message, so that the format can change.
const msgVersion = 1

// A Request asks a holder for leases: the sender, a dir host of User,
// references the blocks Digests and asks to keep them for Term.
type Request struct {
	User    spindle.UserName
	Term    time.Duration
	Digests []blocks.Digest
}

// A Reply says how many of a Request's leases were granted; Refused ones
// came up against a quota, which Reason names.
type Reply struct {
	Granted int
	Refused int
	Reason  string
}

// Marshal encodes r.
func (r *Request) Marshal() []byte {
	b := make([]byte, 0, 32+len(r.User)+32*len(r.Digests))
	b = append(b, msgVersion)
	b = binary.AppendUvarint(b, uint64(len(r.User)))
	b = append(b, r.User...)
	b = binary.AppendUvarint(b, uint64(r.Term/time.Second))
	b = binary.AppendUvarint(b, uint64(len(r.Digests)))
	for _, d := range r.Digests {
		b = append(b, d[:]...)
	}
	return b
}

// UnmarshalRequest decodes a Request from untrusted bytes. It reports
// anything malformed as Invalid. It does not check the user name.
func UnmarshalRequest(b []byte) (*Request, error) {
	const op spindle.Op = "lease.UnmarshalRequest"
	bad := func(what string) error { return spindle.E(op, spindle.Invalid, "malformed lease request: "+what) }
	if len(b) > MaxMessage {
		return nil, bad(fmt.Sprintf("%d bytes, more than %d", len(b), MaxMessage))
	}
	if len(b) < 1 || b[0] != msgVersion {
		return nil, bad("unknown version")
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > 254 || uint64(len(b)-k) < n {
		return nil, bad("bad user name length")
	}
	r := &Request{User: spindle.UserName(b[k : k+int(n)])}
	b = b[k+int(n):]
	secs, k := binary.Uvarint(b)
	if k <= 0 || secs == 0 || secs > uint64(100*365*24*time.Hour/time.Second) {
		return nil, bad("bad term")
	}
	r.Term = time.Duration(secs) * time.Second
	b = b[k:]
	n, k = binary.Uvarint(b)
	if k <= 0 || n > MaxDigests {
		return nil, bad("bad block count")
	}
	b = b[k:]
	if uint64(len(b)) != 32*n {
		return nil, bad(fmt.Sprintf("%d bytes of digests for %d blocks", len(b), n))
	}
	r.Digests = make([]blocks.Digest, n)
	for i := range r.Digests {
		copy(r.Digests[i][:], b[32*i:])
	}
	return r, nil
}

// Marshal encodes r.
func (r *Reply) Marshal() []byte {
	b := []byte{msgVersion}
	b = binary.AppendUvarint(b, uint64(r.Granted))
	b = binary.AppendUvarint(b, uint64(r.Refused))
	reason := r.Reason
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

// UnmarshalReply decodes a Reply from untrusted bytes.
func UnmarshalReply(b []byte) (*Reply, error) {
	const op spindle.Op = "lease.UnmarshalReply"
	err := func() error {
		if len(b) < 1 || b[0] != msgVersion {
			return errors.New("unknown version")
		}
		b = b[1:]
		return nil
	}()
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, "malformed lease reply: "+err.Error())
	}
	var v [3]uint64
	for i := range v {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > MaxMessage {
			return nil, spindle.E(op, spindle.Invalid, "malformed lease reply: bad count")
		}
		v[i], b = n, b[k:]
	}
	if uint64(len(b)) != v[2] || v[2] > maxReason {
		return nil, spindle.E(op, spindle.Invalid, "malformed lease reply: bad reason length")
	}
	return &Reply{Granted: int(v[0]), Refused: int(v[1]), Reason: string(b)}, nil
}
