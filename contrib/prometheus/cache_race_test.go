package redeqprom

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Workers that meet new topics at once, as the cache fills, do not take
// it past maxCachedTopics between them.
func TestSeriesCacheStaysBoundedUnderRace(t *testing.T) {
	for round := range 100 {
		var c topicCache
		for i := range maxCachedTopics - 2 {
			c.m.Store(fmt.Sprint("warm", i), new(topicSeries))
		}
		c.n.Store(maxCachedTopics - 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				<-start
				for i := range 4 {
					c.get(fmt.Sprint(w, "-", i))
				}
			})
		}
		close(start)
		wg.Wait()
		n := 0
		c.m.Range(func(any, any) bool { n++; return true })
		require.LessOrEqual(t, n, maxCachedTopics, "round %d", round)
	}
}
