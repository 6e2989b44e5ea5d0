package spindle

import (
	"fmt"
	"strings"
	"testing"
)

// Every error MarshalBinary encodes decodes, however deeply nested: below
// maxErrorDepth, nested errors travel as their messages.
func TestMarshalDeepNesting(t *testing.T) {
	var err error = E(Op("leaf"), NotExist, "bottom")
	for i := 0; i < 3*maxErrorDepth; i++ {
		err = &Error{Op: Op(fmt.Sprintf("op%d", i)), Err: err}
	}
	b, merr := err.(*Error).MarshalBinary()
	if merr != nil {
		t.Fatal(merr)
	}
	got := UnmarshalError(b)
	if KindOf(got) == Invalid {
		t.Fatalf("a deeply nested error did not decode: %v", got)
	}
	if !strings.Contains(got.Error(), "bottom") {
		t.Errorf("decoded error lost its cause: %v", got)
	}
}
