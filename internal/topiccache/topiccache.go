package topiccache

import (
	"sync"
	"sync/atomic"
)

// Max is the most topics a Cache keeps.
const Max = 1024

// Cache maps a topic to its T. The zero value is ready to use.
type Cache[T any] struct {
	m     sync.Map
	n     atomic.Int64
	limit int64 // 0: Max
}

// Get returns topic's T, built by build on the first call for topic. Once
// the cache holds Max topics, the T of a topic not in it is built anew on
// each call and not kept.
func (c *Cache[T]) Get(topic string, build func(topic string) T) T {
	if v, ok := c.m.Load(topic); ok {
		return v.(T)
	}
	t := build(topic)
	limit := c.limit
	if limit == 0 {
		limit = Max
	}
	if c.n.Load() >= limit {
		return t
	}
	// A slot is taken before the store, so that workers meeting new
	// topics at once do not fill the cache past its bound between them.
	if c.n.Add(1) > limit {
		c.n.Add(-1)
		return t
	}
	v, loaded := c.m.LoadOrStore(topic, t)
	if loaded {
		c.n.Add(-1)
	}
	return v.(T)
}

// Len is the number of topics kept.
func (c *Cache[T]) Len() int { return int(c.n.Load()) }
