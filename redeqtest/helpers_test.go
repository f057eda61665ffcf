package redeqtest_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/redeq-go/redeq/redeqtest"
)

// fakeT records a failure instead of failing the test, to test helpers
// that fail tests.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

// runFatal runs f on a goroutine of its own, so that a Fatalf of a fakeT
// ends only f.
func runFatal(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// envOf returns an Env that reports to ft, cleaned up with t.
func envOf(t *testing.T, ft *fakeT) *redeqtest.Env {
	var env *redeqtest.Env
	runFatal(func() { env = redeqtest.New(ft) })
	if env == nil {
		t.Fatal("New failed: " + ft.msg)
	}
	return env
}
