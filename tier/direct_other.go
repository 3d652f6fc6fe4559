//go:build !linux

package tier

// oDirect is 0 where Tarfa does not use O_DIRECT: reads are buffered.
const oDirect = 0
