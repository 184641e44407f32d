package memstore

// ForceIndexCollisions makes every key share one index slot, so tests can reach
// the path a 128-bit prefix collision takes.
func ForceIndexCollisions(s *Store) { s.collideForTest = true }
