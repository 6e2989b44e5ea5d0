package access_test

import (
	"fmt"

	"spindle.dev"
	"spindle.dev/access"
)

func Example() {
	acc, err := access.Parse("ann@example.com/photos/Access", []byte(`
# Ann's photos
read, list: family, *@example.org
w: ann+camera@example.com
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	family, err := access.ParseGroup("ann@example.com/Group/family", []byte("bob@example.com, carl@other.net"))
	if err != nil {
		fmt.Println(err)
		return
	}
	load := func(name spindle.PathName) (*access.Group, error) {
		if name == family.Path() {
			return family, nil
		}
		return nil, spindle.E(spindle.NotExist, name)
	}
	const photo = spindle.PathName("ann@example.com/photos/2025/beach.jpg")
	for _, q := range []struct {
		user  spindle.UserName
		right access.Right
	}{
		{"bob@example.com", access.Read},
		{"bob@example.com", access.Write},
		{"dave+phone@example.org", access.List},
		{"ann+camera@example.com", access.Write},
		{"ann@example.com", access.Read},
		{"ann@example.com", access.Write},
	} {
		ok, err := acc.Can(q.user, q.right, photo, load)
		fmt.Println(q.user, q.right, ok, err)
	}
	readers, err := acc.Users(access.Read, load)
	fmt.Println(readers, err)

	_, err = access.Parse("ann@example.com/Access", []byte("rea: bob@abc.com"))
	fmt.Println(err)
	// Output:
	// bob@example.com read true <nil>
	// bob@example.com write false <nil>
	// dave+phone@example.org list true <nil>
	// ann+camera@example.com write true <nil>
	// ann@example.com read true <nil>
	// ann@example.com write false <nil>
	// [*@example.org ann@example.com bob@example.com carl@other.net] <nil>
	// access.Parse: ann@example.com/Access: invalid operation: invalid access rights on line 1: "rea"
}
