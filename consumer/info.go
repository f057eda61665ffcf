package consumer

import (
	"encoding/json"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
)

// Info is what names a consumer to a person: the consumers view shows
// it beside the consumer's id, so that a stuck job can be traced to a
// process. Each heartbeat records it (keys.AliveInfo).
type Info struct {
	Name string `json:"name"` // config.Config.ClientName, else the host name
	Host string `json:"host"` // os.Hostname
	PID  int    `json:"pid"`
	// Format is the newest format of the job state the consumer reads
	// (keys.FormatCurrent); "" from a consumer of an older version.
	Format string `json:"format,omitempty"`
}

// maxHost bounds the host name recorded: a DNS name is at most 253 bytes.
const maxHost = 255

// LocalInfo is this process's Info under name ("" for the host name).
func LocalInfo(name string) Info {
	host, _ := os.Hostname()
	host = clip(host, maxHost)
	if name == "" {
		name = clip(host, config.MaxClientName)
	}
	return Info{Name: clip(name, config.MaxClientName), Host: host, PID: os.Getpid(), Format: keys.FormatCurrent}
}

// encode is i as the heartbeat records it: a JSON object, at most a few
// hundred bytes.
func (i Info) encode() string {
	b, _ := json.Marshal(i) // strings and an int: cannot fail
	return string(b)
}

// ParseInfo reads an Info a heartbeat recorded; ok is false for a value
// that is not one (a consumer of an older version records none). What it
// returns is clipped to the bounds the heartbeat keeps and holds no
// control character, whatever the value held.
func ParseInfo(s string) (Info, bool) {
	var i Info
	if len(s) > 4096 || json.Unmarshal([]byte(s), &i) != nil {
		return Info{}, false
	}
	i.Name = clip(i.Name, config.MaxClientName)
	i.Host = clip(i.Host, maxHost)
	i.Format = clip(i.Format, 8)
	return i, true
}

// clip cuts s to at most n bytes on a rune boundary, and replaces its
// control characters with '?'.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
