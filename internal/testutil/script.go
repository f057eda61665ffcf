package testutil

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/script"
	"github.com/stretchr/testify/require"
)

// Script is one of the library's Lua scripts as the commands that run it
// carry it: EVALSHA with its SHA1, or EVAL with its source. Name (the
// file's name, such as "add.lua") names it in a test's messages.
type Script struct {
	Name, SHA, Src string
}

// LoadScript reads the script at path (relative to the test's package,
// such as "add.lua" or "../ready/fetch.lua"), with the prelude before it
// as script.New loads it.
func LoadScript(t testing.TB, path string) Script {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	return ScriptOf(filepath.Base(path), script.Source(string(src)))
}

// ScriptOf is the script named name with source src (for a package that
// exports its source, such as pool.AddSource).
func ScriptOf(name, src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Name: name, SHA: hex.EncodeToString(sum[:]), Src: src}
}

// RunBy tells whether cmd runs s.
func (s Script) RunBy(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "evalsha":
		return fmt.Sprint(args[1]) == s.SHA
	case "eval":
		return fmt.Sprint(args[1]) == s.Src
	}
	return false
}
