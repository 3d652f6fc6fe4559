//go:build !linux

package tier

import "github.com/tarfa-ai/tarfa/internal/pagecache"

// oDirect is 0 where Tarfa does not use O_DIRECT: reads are buffered.
const oDirect = 0

// readCached is Linux's (mincore, then pread); elsewhere reads are
// buffered anyway.
func readCached(*pagecache.Map, int, []byte, int64, bool) bool { return false }

const hasReadCached = false
