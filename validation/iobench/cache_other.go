//go:build !linux

package iobench

import (
	"errors"
	"os"
)

// DropCaches reports that dropping the page cache is implemented on Linux
// only: elsewhere every figure is measured warm.
func DropCaches() error {
	return errors.New("dropping the page cache is implemented on Linux only")
}

func openDirect(path string) (*os.File, error) {
	return nil, errors.New("O_DIRECT is used on Linux only")
}

func alignedBuffer(n int) ([]byte, func(), error) { return make([]byte, n), func() {}, nil }
