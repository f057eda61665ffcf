// Command redeq inspects and operates redeq's queues: topics and their
// counts, jobs by state, one job with its body, and the admin actions
// (add, delete, reschedule, requeue, pause, resume), the periodic
// schedules (list, pause, resume, delete), plus the web dashboard.
//
//	go install github.com/redeq-go/redeq/cmd/redeq@latest
//	redeq --redis redis://localhost:6379 stats
//	redeq --config redeq.yaml list orders dead -o json
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 not found (a job, a topic or a
// schedule).
package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs each failed dial; the command reports the error once.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	err := root.ExecuteContext(ctx)
	code := exitCode(err)
	if err != nil {
		msg := errorText(err)
		if wantsJSON(args) {
			b, _ := json.Marshal(struct {
				Error string `json:"error"`
				Exit  int    `json:"exit"`
			}{msg, code})
			_, _ = stderr.Write(append(b, '\n'))
			return code
		}
		_, _ = io.WriteString(stderr, "redeq: "+msg+"\n")
		if code == exitUsage {
			_, _ = io.WriteString(stderr, "Run 'redeq --help' for usage.\n")
		}
	}
	return code
}

// errorText is err's message without the "redeq: " that the library's
// errors start with, however often wrapping repeated it.
func errorText(err error) string {
	msg := err.Error()
	for {
		rest, ok := strings.CutPrefix(msg, "redeq: ")
		if !ok {
			return msg
		}
		msg = rest
	}
}

// wantsJSON reports whether the command line asks for JSON output, so that
// an error, a usage error included, is JSON too.
func wantsJSON(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-o" || a == "--output":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case a == "-ojson" || a == "-o=json" || a == "--output=json":
			return true
		}
	}
	return false
}
