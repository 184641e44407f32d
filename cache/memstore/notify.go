package memstore

// Subscribe implements cache.Notifier: the channel closes when the key's record
// completes, is released, deleted, expires or is evicted.
func (s *Store) Subscribe(key string) (<-chan struct{}, func()) {
	k := internKey(key)
	return s.shardFor(&k).waiters.Subscribe(k)
}
