package topiccache

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A topic's value is built once and kept; past the bound, the values of
// further topics are built on each call and not kept.
func TestBuiltOnceWithinTheBound(t *testing.T) {
	c := Cache[*int]{limit: 2}
	builds := map[string]int{}
	build := func(topic string) *int { builds[topic]++; n := builds[topic]; return &n }
	a := c.Get("a", build)
	require.Same(t, a, c.Get("a", build))
	c.Get("b", build)
	c.Get("c", build)
	c.Get("c", build)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 2}, builds)
	require.Equal(t, 2, c.Len())
}

// Workers that meet new topics at once, as the cache fills, do not take
// it past its bound between them.
func TestBoundedUnderRace(t *testing.T) {
	build := func(string) *int { return new(int) }
	for round := range 100 {
		var c Cache[*int]
		for i := range Max - 2 {
			c.Get(fmt.Sprint("warm", i), build)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				<-start
				for i := range 4 {
					c.Get(fmt.Sprint(w, "-", i), build)
				}
			})
		}
		close(start)
		wg.Wait()
		n := 0
		c.m.Range(func(any, any) bool { n++; return true })
		require.LessOrEqual(t, n, Max, "round %d", round)
		require.Equal(t, n, c.Len(), "round %d", round)
	}
}
