package keyraft

import (
	"context"
	"errors"
	"slices"
	"testing"

	"spindle.dev"
)

func TestDomain(t *testing.T) {
	c := memCluster(t)
	ctx := context.Background()
	for _, u := range []spindle.UserName{"ann@example.com", "bob@example.com", "carl@other.org"} {
		if err := c.Put(ctx, register(t, newSigner(t, u))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Domain(ctx, "Example.com")
	if err != nil {
		t.Fatal(err)
	}
	if want := []spindle.UserName{"ann@example.com", "bob@example.com"}; !slices.Equal(got, want) {
		t.Errorf("Domain(example.com) = %v, want %v", got, want)
	}
	if got, _ := c.Domain(ctx, "nowhere.org"); len(got) != 0 {
		t.Errorf("Domain(nowhere.org) = %v, want none", got)
	}
	if _, err := c.Domain(ctx, "bad domain"); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Domain(bad domain): %v, want Invalid", err)
	}
}
