package spindle_test

import (
	"errors"
	"fmt"

	"spindle.dev"
)

func ExampleE() {
	const op spindle.Op = "dirlog.Append"
	err := spindle.E(op, spindle.PathName("ann@example.com/a.txt"), spindle.UserName("bob@example.com"), spindle.Permission)
	fmt.Println(err)
	fmt.Println(errors.Is(err, spindle.Permission), errors.Is(err, spindle.NotExist))

	// An outer error takes the kind, path and user of the one it wraps.
	outer := spindle.E(spindle.Op("spin.get"), err)
	fmt.Println(outer)
	fmt.Println(spindle.KindOf(outer))
	// Output:
	// dirlog.Append: ann@example.com/a.txt, user bob@example.com: permission denied
	// true false
	// spin.get: ann@example.com/a.txt, user bob@example.com: permission denied: dirlog.Append
	// permission denied
}

func ExampleMatch() {
	err := spindle.E(spindle.Op("blocks.Get"), spindle.NotExist, spindle.PathName("ann@example.com/x"), "no such block")
	fmt.Println(spindle.Match(spindle.E(spindle.NotExist), err))
	fmt.Println(spindle.Match(spindle.E(spindle.NotExist, "no such block"), err))
	fmt.Println(spindle.Match(spindle.E(spindle.Permission), err))
	// Output:
	// true
	// true
	// false
}

func ExampleUnmarshalError() {
	sent := spindle.E(spindle.Op("keyraft.Put"), spindle.Invalid, spindle.UserName("ann@example.com"), "record signed with the wrong key")
	data, _ := sent.(*spindle.Error).MarshalBinary()
	got := spindle.UnmarshalError(data)
	fmt.Println(got)
	fmt.Println(errors.Is(got, spindle.Invalid))
	// Output:
	// keyraft.Put: user ann@example.com: invalid operation: record signed with the wrong key
	// true
}

func ExampleParseUser() {
	canon, user, suffix, domain, err := spindle.ParseUser("ann+camera@Example.COM.")
	fmt.Println(canon, user, suffix, domain, err)
	fmt.Println(spindle.BaseUser(canon))
	_, _, _, _, err = spindle.ParseUser("ann@localhost")
	fmt.Println(err)
	// Output:
	// ann+camera@example.com ann+camera camera example.com <nil>
	// ann@example.com
	// spindle.ParseUser: user ann@localhost: invalid operation: domain "localhost" has no period
}

func ExampleParse() {
	for _, name := range []spindle.PathName{
		"ann@example.com",
		"me@here.com/../../etc",
		"ann@Example.com//photos/./2024/../2025/",
	} {
		p, err := spindle.Parse(name)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s (%d elements)\n", p, p.NElem())
	}
	// Output:
	// ann@example.com/ (0 elements)
	// me@here.com/etc (1 elements)
	// ann@example.com/photos/2025 (2 elements)
}
