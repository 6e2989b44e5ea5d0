package main

import "context"

const linkUsage = `Usage:
    spin link TARGET PATH

Makes PATH a link to TARGET, which may be in another user's tree and need
not exist yet. Reading PATH reads TARGET.

Options:
    -h, -help   print this text

Example:
    $ spin link bob@example.com/pub/plans.txt @/plans.txt
`

func runLink(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return usagef("want TARGET and PATH, %s", gotArgs(flags.NArg()))
	}
	if dirPath(flags.Arg(1)) {
		st.errorf("%s: a directory path given for a link: name the link itself, without a trailing /", flags.Arg(1))
		return errFailed
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	target, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	name, err := st.spinPath(c, flags.Arg(1))
	if err != nil {
		return err
	}
	if _, err := c.PutLink(ctx, target, name); err != nil {
		return st.fail(string(name), err)
	}
	return nil
}
