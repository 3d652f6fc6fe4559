package weights

import "golang.org/x/sys/unix"

// mapPopulate makes a spare buffer's mmap fault its pages in at once
// (Arena.KeepSpare).
const mapPopulate = unix.MAP_POPULATE
