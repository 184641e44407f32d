//go:build race

package cache_test

// raceEnabled: the race detector drops sync.Pool entries at random, so
// allocation counts of pooled code are not asserted under it.
const raceEnabled = true
