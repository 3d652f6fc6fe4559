//go:build !linux

package tier

// oDirect is 0 where Tarfa does not use O_DIRECT: reads are buffered.
const oDirect = 0

// readCached is Linux's (preadv2 with RWF_NOWAIT); elsewhere reads are
// buffered anyway.
func readCached(int, []byte, int64) bool { return false }

const hasReadCached = false
