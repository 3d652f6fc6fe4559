//go:build race

package engine

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
