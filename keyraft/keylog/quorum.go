package keylog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// Cosigned tree heads. A tree head counts only with the signatures of a
// majority of the members recorded in the configuration it names
// (HeadInfo.Config); the members gather them (see package keyraft), and
// members and clients alike check them here.

// ParseHead returns what a signed tree head states, without checking any
// signature: for choosing how to check it. Bytes that are not a head are
// Invalid. It is safe on untrusted input.
func ParseHead(head []byte) (HeadInfo, error) {
	const op spindle.Op = "keylog.ParseHead"
	if len(head) > maxHeadSize {
		return HeadInfo{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("tree head of %d bytes", len(head)))
	}
	_, err := note.Open(head, nil)
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		return HeadInfo{}, spindle.E(op, spindle.Invalid, fmt.Errorf("tree head: %v", err))
	}
	n := unverified.Note
	hi, err := parseHead(n.Text)
	if err != nil {
		return HeadInfo{}, spindle.E(op, spindle.Invalid, err)
	}
	return hi, nil
}

// VerifyQuorum checks that head carries valid signatures of a majority of
// members (note verifier keys by member ID), the members recorded in the
// configuration that the head names, and returns what it states and the
// IDs of the members whose signatures verified. A head short of a majority,
// or with a bad signature by a member, is Integrity; a malformed one is
// Invalid.
func VerifyQuorum(head []byte, members map[string]string) (HeadInfo, []string, error) {
	const op spindle.Op = "keylog.VerifyQuorum"
	hi, err := ParseHead(head)
	if err != nil {
		return HeadInfo{}, nil, spindle.E(op, err)
	}
	if len(members) == 0 {
		return HeadInfo{}, nil, spindle.E(op, spindle.Integrity, fmt.Sprintf("configuration %d records no members: nobody may sign its heads", hi.Config))
	}
	ids := slices.Sorted(maps.Keys(members))
	var list []note.Verifier
	byName := make(map[string]string, len(members))
	for _, id := range ids {
		v, err := note.NewVerifier(members[id])
		if err != nil {
			return HeadInfo{}, nil, spindle.E(op, spindle.Invalid, fmt.Errorf("verifier key of member %s: %v", id, err))
		}
		list = append(list, v)
		byName[v.Name()] = id
	}
	need := len(members)/2 + 1
	n, err := note.Open(head, note.VerifierList(list...))
	var signers []string
	if err == nil {
		for _, s := range n.Sigs {
			if id, ok := byName[s.Name]; ok && !slices.Contains(signers, id) {
				signers = append(signers, id)
			}
		}
	} else {
		var unverified *note.UnverifiedNoteError
		if !errors.As(err, &unverified) {
			return HeadInfo{}, nil, spindle.E(op, spindle.Integrity, fmt.Errorf("tree head of %d leaves: %v", hi.N, err))
		}
	}
	slices.Sort(signers)
	if len(signers) < need {
		return HeadInfo{}, nil, spindle.E(op, spindle.Integrity, fmt.Sprintf(
			"tree head of %d leaves is signed by %d of the %d members of configuration %d, and needs %d (signed by: %s; members: %s)",
			hi.N, len(signers), len(members), hi.Config, need, listOr(signers), strings.Join(ids, ", ")))
	}
	return hi, signers, nil
}

func listOr(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// VerifyWitnesses checks that head carries valid cosignatures of at least
// quorum of the witnesses (note verifier keys by witness ID) and returns
// the IDs of those whose cosignatures verified. A head short of the
// quorum, or with a bad cosignature by a witness, is Integrity. The
// members' signatures are VerifyQuorum's to check.
func VerifyWitnesses(head []byte, witnesses map[string]string, quorum int) ([]string, error) {
	const op spindle.Op = "keylog.VerifyWitnesses"
	if quorum <= 0 {
		return nil, nil
	}
	hi, err := ParseHead(head)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	ids := slices.Sorted(maps.Keys(witnesses))
	var list []note.Verifier
	byName := make(map[string]string, len(witnesses))
	for _, id := range ids {
		v, err := note.NewVerifier(witnesses[id])
		if err != nil {
			return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("verifier key of witness %s: %v", id, err))
		}
		list = append(list, v)
		byName[v.Name()] = id
	}
	var signers []string
	n, err := note.Open(head, note.VerifierList(list...))
	var unverified *note.UnverifiedNoteError
	switch {
	case err == nil:
		for _, s := range n.Sigs {
			if id, ok := byName[s.Name]; ok && !slices.Contains(signers, id) {
				signers = append(signers, id)
			}
		}
	case !errors.As(err, &unverified):
		return nil, spindle.E(op, spindle.Integrity, fmt.Errorf("tree head of %d leaves: %v", hi.N, err))
	}
	slices.Sort(signers)
	if len(signers) < quorum {
		return nil, spindle.E(op, spindle.Integrity, fmt.Sprintf(
			"tree head of %d leaves is cosigned by %d of the %d witnesses, and needs %d (cosigned by: %s; witnesses: %s): a head no witness saw may be of a fork",
			hi.N, len(signers), len(witnesses), quorum, listOr(signers), strings.Join(ids, ", ")))
	}
	return signers, nil
}
