package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMessages runs the scripts in testdata/messages, which check what
// users are shown for input a script cannot spell as a plain argument:
// very long names and bytes that are not UTF-8. Besides the commands of
// TestScript they may use
//
//	envrepeat VAR N TEXT   set $VAR to TEXT repeated N times
//	envquote VAR QUOTED    set $VAR to the Go string literal QUOTED ("a\xffb")
func TestMessages(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/messages",
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			return nil
		},
		Condition: func(cond string) (bool, error) { return cond == "node" && runNode != nil, nil },
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile": cmdWaitfile,
			"envfile":  cmdEnvfile,
			"envrepeat": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 3 {
					ts.Fatalf("usage: envrepeat VAR N TEXT")
				}
				n, err := strconv.Atoi(args[1])
				ts.Check(err)
				ts.Setenv(args[0], strings.Repeat(args[2], n))
			},
			"envquote": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: envquote VAR QUOTED")
				}
				s, err := strconv.Unquote(args[1])
				ts.Check(err)
				ts.Setenv(args[0], s)
			},
		},
	})
}
