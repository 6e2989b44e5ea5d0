//go:build !linux

package main

import (
	"errors"
	"os"
)

func openDirect(name string) (*os.File, error) {
	return nil, errors.New("no O_DIRECT on this system")
}
