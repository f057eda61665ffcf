package testutil

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Script is one of the library's Lua scripts as the commands that run it
// carry it: EVALSHA with its SHA1, or EVAL with its source.
type Script struct {
	SHA, Src string
}

// LoadScript reads the script at path (relative to the test's package).
func LoadScript(t *testing.T, path string) Script {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha1.Sum(src)
	return Script{SHA: hex.EncodeToString(sum[:]), Src: string(src)}
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
