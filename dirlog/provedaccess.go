package dirlog

import (
	"encoding/binary"
	"fmt"

	"spindle.dev"
	"spindle.dev/access"
)

// An AccessProved proves a WhichAccess answer against a signed head: the
// governing Access file is in the tree (with the signed entries its value
// is made of, so that its text is the owner's and current) and no Access
// file nearer the name is (see [access.Candidates]); or, when no Access
// file governs, that none of the candidates is in the tree.
type AccessProved struct {
	Head *Head
	Name spindle.PathName // The name asked about.
	// Found proves the governing Access file, or is nil if none governs.
	Found *Proved
	// Absent proves the absence of each Access file nearer the name than
	// Found (of every candidate, if Found is nil), nearest first.
	Absent []*Proved
}

// Verify checks that ap proves its answer against ap.Head.Root, as the
// type's comment says: Found, if set, is an inclusion with the signed
// entries of an item put as an Access file, and every candidate nearer
// the name is proved absent. It checks neither the head's signature nor
// the entries' (see [Proved.Verify]). Failures are Integrity.
func (ap *AccessProved) Verify() error {
	const op spindle.Op = "dirlog.AccessProved.Verify"
	if ap.Head == nil {
		return spindle.E(op, spindle.Integrity, ap.Name, "no head")
	}
	names, err := access.Candidates(ap.Name)
	if err != nil {
		return spindle.E(op, spindle.Integrity, ap.Name, err)
	}
	want := len(names)
	if ap.Found != nil {
		want = -1
		for i, n := range names {
			if n == ap.Found.Name {
				want = i
			}
		}
		if want < 0 {
			return spindle.E(op, spindle.Integrity, ap.Name, fmt.Sprintf("%s cannot govern it", ap.Found.Name))
		}
	}
	if len(ap.Absent) != want {
		return spindle.E(op, spindle.Integrity, ap.Name, fmt.Sprintf("proves the absence of %d nearer Access files, not %d", len(ap.Absent), want))
	}
	for i, pr := range ap.Absent {
		if pr.Name != names[i] {
			return spindle.E(op, spindle.Integrity, ap.Name, fmt.Sprintf("proves the absence of %s, not of %s", pr.Name, names[i]))
		}
		if pr.Proof == nil || pr.Proof.End == EndIncluded {
			return spindle.E(op, spindle.Integrity, ap.Name, fmt.Sprintf("no proof that %s is absent", names[i]))
		}
		pr.Head = ap.Head
		if err := pr.Verify(); err != nil {
			return spindle.E(op, ap.Name, fmt.Errorf("nearer Access file %s: %w", names[i], err))
		}
	}
	if f := ap.Found; f != nil {
		if f.Proof == nil || f.Proof.End != EndIncluded || len(f.Entries) == 0 {
			return spindle.E(op, spindle.Integrity, ap.Name, fmt.Sprintf("no proof with signed entries that %s is in the tree", f.Name))
		}
		f.Head = ap.Head
		if err := f.Verify(); err != nil {
			return spindle.E(op, ap.Name, err)
		}
	}
	return nil
}

// Encoding of proofs for travel, without their head, which travels beside
// them.
const (
	provedMagic = "SPDLP1"
	// MaxProvedEntries bounds the entries of one Proved: the put and the
	// renames that moved the item since.
	MaxProvedEntries = 1 << 12
	// MaxProved bounds an encoded Proved.
	MaxProved = 64 << 20
)

// Marshal encodes pr without its head: the name, the map proof, the value
// and the signed entries.
func (pr *Proved) Marshal() []byte {
	b := append([]byte(nil), provedMagic...)
	b = appendString(b, string(pr.Name))
	b = appendBytes(b, pr.Proof.Marshal())
	b = append(b, pr.Value[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(pr.Entries)))
	for _, e := range pr.Entries {
		b = appendBytes(b, e.Marshal())
	}
	return b
}

// UnmarshalProved decodes a Proved encoded by [Proved.Marshal], from bytes
// that need not be trusted; its Head is nil. It checks the structure only
// (see [Proved.Verify]). Errors are Invalid.
func UnmarshalProved(data []byte) (*Proved, error) {
	const op spindle.Op = "dirlog.UnmarshalProved"
	pr, err := decodeProved(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed proof: %w", err))
	}
	return pr, nil
}

func decodeProved(data []byte) (*Proved, error) {
	if len(data) > MaxProved {
		return nil, fmt.Errorf("%d bytes, limit is %d", len(data), MaxProved)
	}
	d := decoder{b: data}
	if string(d.take(len(provedMagic), "magic")) != provedMagic {
		d.fail("bad magic")
	}
	pr := &Proved{Name: spindle.PathName(d.string(MaxNameLen, "name"))}
	proof := d.bytes(MaxMapProof, "map proof")
	copy(pr.Value[:], d.take(len(pr.Value), "value"))
	n := d.u32("entry count")
	if d.err != nil {
		return nil, d.err
	}
	if n > MaxProvedEntries {
		return nil, fmt.Errorf("%d entries, limit is %d", n, MaxProvedEntries)
	}
	var err error
	if pr.Proof, err = decodeMapProof(proof); err != nil {
		return nil, err
	}
	for i := range int(n) {
		b := d.bytes(MaxEntrySize, "entry")
		if d.err != nil {
			return nil, d.err
		}
		e, err := UnmarshalEntry(b)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		pr.Entries = append(pr.Entries, e)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if pr.Proof.End != EndIncluded && (n != 0 || !pr.Value.IsZero()) {
		return nil, fmt.Errorf("an exclusion proof with a value or entries")
	}
	return pr, nil
}
