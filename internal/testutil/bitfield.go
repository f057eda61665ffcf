package testutil

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// AddBitfield gives a miniredis the part of BITFIELD that redeq's history
// counters use (OVERFLOW SAT or WRAP, INCRBY and GET of u32 fields at
// "#n" offsets), so that the history suites run on miniredis too. miniredis
// has no BITFIELD; without it the scripts record no history (they call it
// with pcall). The command reads and writes the key with GET and SETRANGE,
// so it keeps the key's expiry and is atomic inside a script, where
// miniredis holds its lock.
func AddBitfield(m *miniredis.Miniredis) error {
	return m.Server().Register("BITFIELD", func(c *server.Peer, cmd string, args []string) {
		if len(args) < 1 {
			c.WriteError("ERR wrong number of arguments for 'bitfield' command")
			return
		}
		key := args[0]
		cur, err := call(m, c, "GET", key)
		if err != nil {
			c.WriteError(err.Error())
			return
		}
		var val []byte
		switch v := cur.(type) {
		case string:
			val = []byte(v)
		case []byte:
			val = v
		}
		buf := append([]byte(nil), val...)
		sat := false
		var out []int64
		wrote := false
		for i := 1; i < len(args); {
			op := strings.ToUpper(args[i])
			switch {
			case op == "OVERFLOW" && i+1 < len(args):
				sat = strings.EqualFold(args[i+1], "SAT")
				i += 2
			case (op == "INCRBY" && i+3 < len(args)) || (op == "GET" && i+2 < len(args)):
				if !strings.EqualFold(args[i+1], "u32") || !strings.HasPrefix(args[i+2], "#") {
					c.WriteError("ERR this BITFIELD supports u32 fields at #n offsets only")
					return
				}
				n, err := strconv.Atoi(args[i+2][1:])
				if err != nil || n < 0 {
					c.WriteError("ERR bit offset is not an integer or out of range")
					return
				}
				off := 4 * n
				if len(buf) < off+4 {
					buf = append(buf, make([]byte, off+4-len(buf))...)
				}
				v := int64(binary.BigEndian.Uint32(buf[off:]))
				if op == "GET" {
					out = append(out, v)
					i += 3
					continue
				}
				d, err := strconv.ParseInt(args[i+3], 10, 64)
				if err != nil {
					c.WriteError("ERR value is not an integer or out of range")
					return
				}
				v += d
				switch {
				case sat && v > math.MaxUint32:
					v = math.MaxUint32
				case sat && v < 0:
					v = 0
				default:
					v &= math.MaxUint32
				}
				binary.BigEndian.PutUint32(buf[off:], uint32(v))
				out = append(out, v)
				wrote = true
				i += 4
			default:
				c.WriteError("ERR syntax error")
				return
			}
		}
		if wrote && !bytes.Equal(buf, val) {
			if _, err := call(m, c, "SETRANGE", key, "0", string(buf)); err != nil {
				c.WriteError(err.Error())
				return
			}
		}
		c.WriteLen(len(out))
		for _, v := range out {
			c.WriteInt(int(v))
		}
	})
}

// call runs one command on m in the caller's connection context (so inside
// a script it does not take miniredis's lock again) and returns its reply.
func call(m *miniredis.Miniredis, c *server.Peer, args ...string) (any, error) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	p := server.NewPeer(w)
	p.Ctx = c.Ctx
	m.Server().Dispatch(p, args)
	w.Flush()
	r, err := server.ParseReply(bufio.NewReader(&b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", args[0], err)
	}
	return r, nil
}
