package iobench

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DropCaches writes dirty pages back (sync) and asks the kernel to drop the
// page cache, dentries and inodes (echo 3 > /proc/sys/vm/drop_caches), so
// that the next read of any file comes from the disk. It needs root; the
// error says why it could not. It drops the cache of the whole machine.
func DropCaches() error { return dropCaches("/proc/sys/vm/drop_caches") }

func dropCaches(path string) error {
	unix.Sync()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("dropping the page cache: %w", err)
	}
	_, err = f.WriteString("3\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dropping the page cache: %w", err)
	}
	return nil
}

// openDirect opens path for reading with O_DIRECT: reads then go to the
// disk past the page cache and need a 4096-aligned buffer and length.
func openDirect(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	return f, nil
}

// alignedBuffer returns n bytes of page-aligned memory (n a multiple of
// 4096) and the function that frees them.
func alignedBuffer(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("aligned read buffer: %w", err)
	}
	return b, func() { unix.Munmap(b) }, nil
}
