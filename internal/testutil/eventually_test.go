package testutil_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// fatalTB records the first Fatalf and ends the goroutine, as testing.T
// does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runTB runs f with a fatalTB and returns what it failed with, "" if it
// did not.
func runTB(t *testing.T, f func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	return tb.msg
}

// TestEventually: Eventually returns once its condition holds, and fails
// naming what it waited for when the condition never holds.
func TestEventually(t *testing.T) {
	t.Run("ReturnsOnceTheConditionHolds", func(t *testing.T) {
		var n atomic.Int32
		msg := runTB(t, func(tb testing.TB) {
			testutil.Eventually(tb, 10*time.Second, "three polls", func() bool { return n.Add(1) >= 3 })
		})
		require.Empty(t, msg)
		require.EqualValues(t, 3, n.Load())
	})
	t.Run("FailsNamingWhatItWaitedFor", func(t *testing.T) {
		msg := runTB(t, func(tb testing.TB) {
			testutil.Eventually(tb, 20*time.Millisecond, "the impossible", func() bool { return false })
		})
		require.True(t, strings.Contains(msg, "the impossible"), msg)
	})
	t.Run("MeasuresNoStepBackOfASteadyClock", func(t *testing.T) {
		start := time.Now()
		time.Sleep(time.Millisecond)
		require.Less(t, testutil.WallBack(start), time.Millisecond)
	})
}
