package pool

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redeq-go/redeq/config"
)

// The envelope is how a job is stored in its pool: a one-line text header
// followed by the body exactly as given,
//
//	1|<created ms>|<attempt>|<recoveries>|<max retries>|<intervals ms, comma-separated>|<flags>[|<headers bytes>]\n[<headers>]<body>
//
// Empty max retries and intervals mean the config's defaults, so a default
// job costs about 23 bytes beyond its body. The header is text so that the
// Lua scripts can read the created time and rewrite the counters with
// string functions; the body is never parsed. A job with headers carries
// an eighth field, the length of the headers block that follows the
// newline: each header as "<len>:<key><len>:<value>". The scripts keep
// everything after the newline when they rewrite the header line, so the
// headers travel with the job through retries, recoveries and rollbacks.

// envelopeVersion is the first header field.
const envelopeVersion = "1"

// flagBroadcast in the flags field marks a broadcast job.
const flagBroadcast = 'b'

// Header is the metadata stored with a job.
type Header struct {
	CreatedMs  int64
	Attempt    int
	Recoveries int
	MaxRetries int     // 0: the config's default
	Intervals  []int64 // ms; nil: the config's default
	Broadcast  bool
	// HeadersLen is the length of the headers block after the header line.
	HeadersLen int
}

// AppendHeader appends h's header line, newline included, to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, envelopeVersion...)
	dst = append(dst, '|')
	dst = strconv.AppendInt(dst, h.CreatedMs, 10)
	dst = append(dst, '|')
	dst = strconv.AppendInt(dst, int64(h.Attempt), 10)
	dst = append(dst, '|')
	dst = strconv.AppendInt(dst, int64(h.Recoveries), 10)
	dst = append(dst, '|')
	if h.MaxRetries != 0 {
		dst = strconv.AppendInt(dst, int64(h.MaxRetries), 10)
	}
	dst = append(dst, '|')
	for i, ms := range h.Intervals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, ms, 10)
	}
	dst = append(dst, '|')
	if h.Broadcast {
		dst = append(dst, flagBroadcast)
	}
	if h.HeadersLen > 0 {
		dst = append(dst, '|')
		dst = strconv.AppendInt(dst, int64(h.HeadersLen), 10)
	}
	return append(dst, '\n')
}

// Encode returns the envelope of h and body.
func Encode(h Header, body []byte) []byte {
	out := make([]byte, 0, 32+len(body)+8*len(h.Intervals))
	return append(AppendHeader(out, h), body...)
}

// ErrCorrupt is an envelope redeq cannot read.
var ErrCorrupt = errors.New("redeq: corrupt envelope")

// maxHeader bounds the header line: the counters plus MaxIntervals intervals.
const maxHeader = 64 + config.MaxIntervals*20

// Decode splits an envelope into its header and body. The body aliases env.
func Decode(env []byte) (Header, []byte, error) { return decode(env, true) }

// decode is Decode; whole says env holds the headers block its header
// line announces.
func decode(env []byte, whole bool) (Header, []byte, error) {
	nl := bytes.IndexByte(env, '\n')
	if nl < 0 || nl > maxHeader {
		return Header{}, nil, fmt.Errorf("%w: no header line", ErrCorrupt)
	}
	// The fields in an array of the most there may be: a consumer reads
	// a header per job, and the split is then no allocation.
	line := env[:nl]
	count := bytes.Count(line, []byte{'|'}) + 1
	if count != 7 && count != 8 {
		return Header{}, nil, fmt.Errorf("%w: %d header fields, want 7 or 8", ErrCorrupt, count)
	}
	var array [8][]byte
	fields := array[:count]
	for i := range count - 1 {
		bar := bytes.IndexByte(line, '|')
		fields[i], line = line[:bar], line[bar+1:]
	}
	fields[count-1] = line
	if string(fields[0]) != envelopeVersion {
		return Header{}, nil, fmt.Errorf("%w: version %q", ErrCorrupt, fields[0])
	}
	var h Header
	var err error
	num := func(b []byte, name string, lo, hi int64) int64 {
		if err != nil {
			return 0
		}
		n, ok := parseInt(b)
		if !ok || n < lo || n > hi {
			err = fmt.Errorf("%w: %s %q", ErrCorrupt, name, b)
		}
		return n
	}
	const maxCount = 1 << 30
	h.CreatedMs = num(fields[1], "created", 0, 1<<50)
	h.Attempt = int(num(fields[2], "attempt", 0, maxCount))
	h.Recoveries = int(num(fields[3], "recoveries", 0, maxCount))
	if len(fields[4]) > 0 {
		h.MaxRetries = int(num(fields[4], "max retries", -1, config.MaxRetriesLimit))
	}
	if len(fields[5]) > 0 {
		parts := bytes.Split(fields[5], []byte{','})
		if len(parts) > config.MaxIntervals {
			return Header{}, nil, fmt.Errorf("%w: %d intervals", ErrCorrupt, len(parts))
		}
		h.Intervals = make([]int64, len(parts))
		for i, p := range parts {
			h.Intervals[i] = num(p, "interval", 1, int64(365*24*time.Hour/time.Millisecond))
		}
	}
	switch string(fields[6]) {
	case "":
	case string(flagBroadcast):
		h.Broadcast = true
	default:
		return Header{}, nil, fmt.Errorf("%w: flags %q", ErrCorrupt, fields[6])
	}
	if len(fields) == 8 {
		h.HeadersLen = int(num(fields[7], "headers length", 1, int64(config.MaxHeaderBytes)*2))
	}
	if err != nil {
		return Header{}, nil, err
	}
	if whole && h.HeadersLen > len(env)-nl-1 {
		return Header{}, nil, fmt.Errorf("%w: headers length %d past the end", ErrCorrupt, h.HeadersLen)
	}
	return h, env[nl+1:], nil
}

// parseInt reads a decimal integer as strconv.ParseInt does (an optional
// sign, then digits; no spaces, no other base), without making a string of
// b: ok is false for anything else or past the range of an int64.
func parseInt(b []byte) (n int64, ok bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, b = b[0] == '-', b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' || u > 1<<63/10 {
			return 0, false // past the range already, or soon
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// AppendHeaders appends the headers block of hs, sorted by key, to dst.
func AppendHeaders(dst []byte, hs map[string]string) []byte {
	keys := make([]string, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = strconv.AppendInt(dst, int64(len(k)), 10)
		dst = append(dst, ':')
		dst = append(dst, k...)
		dst = strconv.AppendInt(dst, int64(len(hs[k])), 10)
		dst = append(dst, ':')
		dst = append(dst, hs[k]...)
	}
	return dst
}

// ParseHeaders reads a headers block; nil for an empty one.
func ParseHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	next := func() (string, error) {
		i := bytes.IndexByte(b, ':')
		if i < 1 || i > 10 {
			return "", fmt.Errorf("%w: bad headers block", ErrCorrupt)
		}
		n, err := strconv.Atoi(string(b[:i]))
		if err != nil || n < 0 || n > len(b)-i-1 {
			return "", fmt.Errorf("%w: bad headers block", ErrCorrupt)
		}
		s := string(b[i+1 : i+1+n])
		b = b[i+1+n:]
		return s, nil
	}
	for len(b) > 0 {
		if len(out) >= config.MaxHeaders {
			return nil, fmt.Errorf("%w: more than %d headers", ErrCorrupt, config.MaxHeaders)
		}
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// Payload is what follows a job's header line: its headers block, then its
// body. Without headers it is the body itself, not a copy.
func Payload(j *Job) []byte {
	if len(j.Headers) == 0 {
		return j.Body
	}
	return append(AppendHeaders(make([]byte, 0, 64+len(j.Body)), j.Headers), j.Body...)
}

// HeaderOf returns the header a new job is stored with; its headers block
// is AppendHeaders(nil, j.Headers).
func HeaderOf(j *Job) Header {
	h := Header{MaxRetries: j.MaxRetries, Broadcast: j.Broadcast}
	if len(j.Headers) > 0 {
		h.HeadersLen = len(AppendHeaders(nil, j.Headers))
	}
	if j.RetryIntervals != nil {
		h.Intervals = make([]int64, len(j.RetryIntervals))
		for i, d := range j.RetryIntervals {
			h.Intervals[i] = DurationMs(d)
		}
	}
	return h
}

// JobOf rebuilds a job from its stored envelope. The job's Body aliases
// env: callers pass a buffer of their own (every caller converts a Redis
// reply), so a large body is not copied twice.
func JobOf(topic, id string, env []byte) (*Job, error) {
	h, body, err := Decode(env)
	if err != nil {
		return nil, fmt.Errorf("job %q of topic %q: %w", id, topic, err)
	}
	return JobFrom(topic, id, h, body)
}

// JobOfHead builds a job from an envelope's header line alone (newline
// included or not): its fields but Body (empty) and Headers (nil).
func JobOfHead(topic, id string, line []byte) (*Job, error) {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line[:len(line):len(line)], '\n')
	}
	h, _, err := decode(line, false)
	if err != nil {
		return nil, fmt.Errorf("job %q of topic %q: %w", id, topic, err)
	}
	h.HeadersLen = 0
	return JobFrom(topic, id, h, nil)
}

// JobFrom builds a job from a decoded header and what follows it (the
// headers block, then the body); the job's Body aliases rest.
func JobFrom(topic, id string, h Header, rest []byte) (*Job, error) {
	hs, err := ParseHeaders(rest[:h.HeadersLen])
	if err != nil {
		return nil, fmt.Errorf("job %q of topic %q: %w", id, topic, err)
	}
	body := rest[h.HeadersLen:]
	j := &Job{
		Headers:    hs,
		Topic:      topic,
		ID:         id,
		Body:       body,
		MaxRetries: h.MaxRetries,
		Broadcast:  h.Broadcast,
		Attempt:    h.Attempt,
		Recoveries: h.Recoveries,
		CreatedAt:  time.UnixMilli(h.CreatedMs),
	}
	if j.Body == nil {
		j.Body = []byte{}
	}
	if h.Intervals != nil {
		j.RetryIntervals = make([]time.Duration, len(h.Intervals))
		for i, ms := range h.Intervals {
			j.RetryIntervals[i] = time.Duration(ms) * time.Millisecond
		}
	}
	return j, nil
}
