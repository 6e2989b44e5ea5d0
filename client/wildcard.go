package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/node/wire"
)

// Under the key cluster's open policy a name is granted to whoever asks
// first, with a key of their own: nothing proves that ann@example.com
// belongs to example.com. A *@domain in an Access or Group file therefore
// grants to whoever has registered a name in that domain, now or later.
// Upspin's meaning stays (*@domain is everyone in the domain), but the
// owner is told who that is: putting an Access file warns with the users
// each wildcard covers today, and spin share lists them for each file.

// domainMembers returns, for each *@domain in users, the users the key
// cluster has registered in that domain now.
func (c *Client) domainMembers(ctx context.Context, users []spindle.UserName) (map[string][]spindle.UserName, error) {
	var out map[string][]spindle.UserName
	for _, u := range users {
		dom, ok := strings.CutPrefix(string(u), "*@")
		if !ok {
			continue
		}
		resp, err := c.svc.call(ctx, &wire.Request{Method: wire.KeyDomain, Pattern: dom})
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = make(map[string][]spindle.UserName)
		}
		out[string(u)] = resp.Users
	}
	return out, nil
}

// wildcardWarning returns the warning for an Access file, with text data,
// that grants a right to *@domain (directly or through its groups): whom
// each wildcard covers now. It returns nil if there is no wildcard, and
// a warning saying so if the members could not be learnt.
func (c *Client) wildcardWarning(ctx context.Context, name spindle.PathName, data []byte) error {
	a, err := access.Parse(name, data)
	if err != nil {
		return nil // Checked before the put; nothing to add.
	}
	users, _, err := a.KnownUsers(access.AnyRight, func(g spindle.PathName) (*access.Group, error) { return c.loadGroup(ctx, g) })
	if err != nil {
		return nil
	}
	members, err := c.domainMembers(ctx, users)
	if err != nil {
		return spindle.E(name, spindle.KindOf(err), because("it grants rights to *@domain, and who that is now could not be learnt", err))
	}
	if len(members) == 0 {
		return nil
	}
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(members)) {
		parts = append(parts, fmt.Sprintf("%s covers %s", w, countUsers(members[w])))
	}
	return spindle.E(name, fmt.Errorf("%s: %w", strings.Join(parts, ", "), ErrOpenWildcard))
}

// countUsers says how many users there are, and names a few.
func countUsers(users []spindle.UserName) string {
	const named = 5
	switch len(users) {
	case 0:
		return "no registered users yet"
	case 1:
		return "1 registered user (" + string(users[0]) + ")"
	}
	s := make([]string, 0, named)
	for _, u := range users[:min(len(users), named)] {
		s = append(s, string(u))
	}
	if len(users) > named {
		s = append(s, "…")
	}
	return fmt.Sprintf("%d registered users (%s)", len(users), strings.Join(s, ", "))
}
