package main

import (
	"encoding/csv"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
)

// ceilingRow is what the server does with a command and nothing else
// around it, as redis-benchmark measures it with 16 connections.
type ceilingRow struct {
	Command   string  `json:"command"`
	Plain     float64 `json:"plain"`     // commands/s, no pipelining
	Pipelined float64 `json:"pipelined"` // commands/s, pipelines of 16
}

// ceilingScript is the one-command script of the EVALSHA line.
const ceilingScript = "return redis.call('SET', KEYS[1], ARGV[1])"

// ceiling: the machine's ceiling for the commands the libraries send,
// from redis-benchmark (redis-tools) on the same server.
func (b *bench) ceiling() {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		fail("redis-benchmark is not on PATH (it comes with redis-tools): %v", err)
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		fail("-redis %q: %v", *addr, err)
	}
	n := 200_000
	if *quick {
		n = 50_000
	}
	fmt.Printf("the machine's ceiling: redis-benchmark, 16 connections, %d requests per test\n", n)
	b.flush()
	sha, err := b.admin.ScriptLoad(b.ctx, ceilingScript).Result()
	if err != nil {
		fail("script load: %v", err)
	}
	run := func(pipeline int, args ...string) map[string]float64 {
		base := []string{"-h", host, "-p", port, "-c", "16", "-n", strconv.Itoa(n), "-P", strconv.Itoa(pipeline), "--csv"}
		out, err := exec.CommandContext(b.ctx, bin, append(base, args...)...).Output()
		if err != nil {
			fail("redis-benchmark %s: %v", strings.Join(args, " "), err)
		}
		recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
		if err != nil || len(recs) < 2 {
			fail("redis-benchmark %s: unexpected output %q (%v)", strings.Join(args, " "), out, err)
		}
		rps := map[string]float64{}
		for _, r := range recs[1:] {
			v, err := strconv.ParseFloat(r[1], 64)
			if err != nil {
				fail("redis-benchmark: rate %q: %v", r[1], err)
			}
			name := strings.ToUpper(r[0])
			if strings.HasPrefix(name, "EVALSHA") {
				name = "EVALSHA"
			}
			rps[name] = v
		}
		return rps
	}
	tests := []string{"-t", "set,get,lpush,zadd"}
	script := []string{"evalsha", sha, "1", "k", "v"}
	plain, piped := run(1, tests...), run(16, tests...)
	for k, v := range run(1, script...) {
		plain[k] = v
	}
	for k, v := range run(16, script...) {
		piped[k] = v
	}
	b.flush()
	commands := []string{"SET", "GET", "LPUSH", "ZADD", "EVALSHA"}
	for _, c := range commands {
		if plain[c] == 0 || piped[c] == 0 {
			fail("redis-benchmark reported no rate for %s", c)
		}
	}
	for _, c := range commands {
		label := c
		if c == "EVALSHA" {
			label = "EVALSHA of a one-command script"
		}
		b.res.Ceiling = append(b.res.Ceiling, ceilingRow{Command: label, Plain: plain[c], Pipelined: piped[c]})
		fmt.Printf("  %-40s %10.0f/s  pipelines of 16: %10.0f/s\n", label, plain[c], piped[c])
	}
}
