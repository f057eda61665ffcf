package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The generated parts of a document sit between
//
//	<!-- bench:begin NAME -->
//	<!-- bench:end NAME -->
//
// and are rewritten from the JSON on every -all or -render; everything
// outside them is left as it is.

// renderDocs rewrites the generated blocks of the performance page and of
// the README from res.
func renderDocs(res *results, perfPath, readmePath string) error {
	d := docs{res}
	if err := fillBlocks(perfPath, map[string]string{
		"header":   wrap(d.header()),
		"results":  d.comparison(),
		"lateness": d.lateness(),
		"alone":    d.alone(),
		"ceiling":  d.ceiling(),
		"overhead": d.overhead(),
		"ledger":   d.ledgerTable(),
		"run":      d.run(),
	}); err != nil {
		return err
	}
	return fillBlocks(readmePath, map[string]string{"summary": wrap(d.summary())})
}

// fillBlocks replaces the body of each named block of the file at path.
// Every block must be there, once.
func fillBlocks(path string, blocks map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	text := string(data)
	for name, body := range blocks {
		begin, end := "<!-- bench:begin "+name+" -->\n", "<!-- bench:end "+name+" -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i || strings.Count(text, begin) != 1 {
			return fmt.Errorf("render %s: needs one %q line followed by %q", path, strings.TrimSpace(begin), end)
		}
		text = text[:i+len(begin)] + body + text[j:]
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return nil
}

// wrap refills a paragraph to lines of at most 76 characters where words
// allow, never breaking a `code span`.
func wrap(text string) string {
	var words []string
	open := false
	for _, w := range strings.Fields(text) {
		if open {
			words[len(words)-1] += " " + w
		} else {
			words = append(words, w)
		}
		if strings.Count(w, "`")%2 == 1 {
			open = !open
		}
	}
	var b strings.Builder
	n := 0
	for _, w := range words {
		switch {
		case n == 0:
		case n+1+len(w) > 76:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String() + "\n"
}

type docs struct{ res *results }

// row returns the row of that name, and whether it was measured.
func (d docs) row(name string) (row, bool) {
	for _, r := range d.res.Rows {
		if r.Name == name && r.Failed == "" {
			return r, true
		}
	}
	return row{}, false
}

// failed returns the reason measurement m failed, or "".
func (d docs) failed(m string) string {
	for _, r := range d.res.Rows {
		if r.Name == m && r.Failed != "" {
			return firstLine(r.Failed)
		}
	}
	return ""
}

func (d docs) pending() string { return fmt.Sprintf("%dk pending", d.res.Sizes.Growth/1000) }

// num formats a figure with as many digits as a reader needs.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "none"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", math.Abs(v))
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		if v < 0 {
			s = "-" + s
		}
		return s
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ratioed is whether redeq/asynq means something for a unit.
func ratioed(unit string) bool {
	switch unit {
	case "jobs/s", "bytes", "cmds", "µs", "s":
		return true
	}
	return false
}

// goal is what the project set out to reach for a row, and a check of it.
type goal struct {
	text string
	met  func(r row) bool
}

func ratio(r row) float64 { return r.Redeq / r.Asynq }

func (d docs) goals() map[string]goal {
	return map[string]goal{
		"enqueue, 1 goroutine":                                  {">= 1.0x", func(r row) bool { return ratio(r) >= 1 }},
		enqueueCutRow:                                           {">= 1.0x", func(r row) bool { return ratio(r) >= 1 }},
		"enqueue, 16 goroutines":                                {">= 1.5x", func(r row) bool { return ratio(r) >= 1.5 }},
		"enqueue, batch of 100 (redeq AddBatch)":                {">= 1.5x", func(r row) bool { return ratio(r) >= 1.5 }},
		"Redis time in the enqueue script per job, 1 goroutine": {"<= 1.0x", func(r row) bool { return ratio(r) <= 1 }},
		"client CPU per enqueued job, 1 goroutine":              {"<= 1.0x", func(r row) bool { return ratio(r) <= 1 }},
		"memory per pending job":                                {"<= 0.55x and <= 330 B", func(r row) bool { return ratio(r) <= 0.55 && r.Redeq <= 330 }},
		"drain":                                                 {">= 4x", func(r row) bool { return ratio(r) >= 4 }},
		"Redis CPU per drained job":                             {"<= 0.3x and <= 10 µs", func(r row) bool { return ratio(r) <= 0.3 && r.Redeq <= 10 }},
		"redis commands per drained job":                        {"<= 2", func(r row) bool { return r.Redeq <= 2 }},
		"enqueue " + d.pending() + " / none":                    {">= 0.8", func(r row) bool { return r.Redeq >= 0.8 }},
		"recovery after kill -9":                                {"< 20 s", func(r row) bool { return r.Redeq < 20 }},
		"lateness min":                                          {"never early", func(r row) bool { return r.Redeq >= 0 }},
		"lateness p50":                                          {"<= 5 ms", func(r row) bool { return r.Redeq <= 5 }},
		"lateness p99":                                          {"<= 5 ms", func(r row) bool { return r.Redeq <= 5 }},
		"jobs run early":                                        {"0", func(r row) bool { return r.Redeq == 0 }},
		overheadRatio:                                           {">= 0.9", func(r row) bool { return r.Redeq >= 0.9 }},
	}
}

func (d docs) goalCell(r row) string {
	g, ok := d.goals()[r.Name]
	if !ok {
		return ""
	}
	if g.met(r) {
		return g.text + ": met"
	}
	return g.text + ": **not met**"
}

// labels are the table's wording for rows whose name is terse.
func (d docs) label(r row) string {
	p := d.pending()
	labels := map[string]string{
		"enqueue, batch of 100 (redeq AddBatch)":                  "enqueue, `AddBatch` of 100 (asynq: its 16-goroutine figure, it has no batch call)",
		"memory per pending job":                                  fmt.Sprintf("memory per pending job (%s jobs)", num(float64(d.res.Sizes.Memory))),
		"drain":                                                   fmt.Sprintf("drain of %s due jobs, 16 workers", num(float64(d.res.Sizes.Drain))),
		"redis commands per drained job":                          "Redis commands per drained job (script-inner included)",
		"Redis CPU per drained job":                               "Redis CPU per drained job (`used_cpu_user` + `used_cpu_sys`)",
		"Redis CPU per enqueued job, 16 goroutines":               "Redis CPU per enqueued job, 16 goroutines (`used_cpu_user` + `used_cpu_sys`)",
		"Redis time in the enqueue script per job, 16 goroutines": "Redis time in the enqueue script per job, 16 goroutines (`commandstats` `usec` of `evalsha`)",
		"Redis time in the enqueue script per job, 1 goroutine":   "Redis time in the enqueue script per job, 1 goroutine (`commandstats` `usec` of `evalsha`)",
		"jobs per enqueue script call, 16 goroutines":             "jobs per enqueue script call, 16 goroutines (the jobs over `commandstats` `calls` of `evalsha`)",
		"client CPU per enqueued job, 1 goroutine":                "client CPU per enqueued job, 1 goroutine (the bench process's user + sys time)",
		enqueueCutRow: "enqueue, 1 goroutine, clients with `ContextTimeoutEnabled`: `Add` on the caller's goroutine",
		"client CPU per enqueued job, 16 goroutines": "client CPU per enqueued job, 16 goroutines (the bench process's user + sys time)",
		"enqueue " + p + " / none":                   "enqueue with " + p + " / with none",
		"drain " + p + " / none":                     "drain with " + p + " / with none",
		"recovery after kill -9":                     "recovery after `kill -9` of a consumer holding jobs",
		"retries spent by recovered jobs":            "retries spent by the recovered jobs",
		"jobs run early":                             fmt.Sprintf("jobs run early (of %s)", num(float64(d.res.Sizes.Lateness*max(1, d.res.Sizes.LatenessRounds)))),
	}
	l, ok := labels[r.Name]
	if !ok {
		l = r.Name
	}
	switch r.Unit {
	case "ratio", "jobs", "retries", "":
		return l
	}
	if i := strings.LastIndex(l, " ("); i >= 0 && strings.HasSuffix(l, ")") {
		return l[:i] + " (" + r.Unit + "; " + l[i+2:]
	}
	return l + " (" + r.Unit + ")"
}

// isLateness tells the rows of the lateness table.
func isLateness(r row) bool {
	return r.AsynqTuned != nil || strings.HasPrefix(r.Name, "lateness") || r.Name == "jobs run early"
}

// section is where a measurement's rows, or its failure, are shown.
func section(measurementOrRow row) string {
	switch {
	case measurementOrRow.Name == "lateness" || isLateness(measurementOrRow):
		return "lateness"
	case measurementOrRow.Name == "overhead" || slices.Contains(overheadRows, measurementOrRow.Name):
		return "overhead"
	case measurementOrRow.Name == "idle" || measurementOrRow.Name == "burst" || measurementOrRow.Solo:
		return "alone"
	case measurementOrRow.Name == "ceiling":
		return "ceiling"
	case strings.HasPrefix(measurementOrRow.Name, "ledger"):
		return "ledger"
	}
	return "results"
}

// failures lists the measurements of a section that failed.
func (d docs) failures(sec string) string {
	var b strings.Builder
	for _, r := range d.res.Rows {
		if r.Failed != "" && section(r) == sec {
			fmt.Fprintf(&b, "\n**The %s measurement failed** in this run: %s\n", r.Name, firstLine(r.Failed))
		}
	}
	return b.String()
}

func (d docs) header() string {
	res := d.res
	m := res.Machine
	took := time.Duration(0)
	for _, x := range res.Measurements {
		took += time.Duration(x.Seconds * float64(time.Second))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Every figure below comes from one run of `%s`, started %s and\n",
		res.Command, res.When.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "measuring for %s, written to [bench-results.json](bench-results.json):\n", took.Round(time.Second))
	fmt.Fprintf(&b, "%d cores", m.Nproc)
	if m.CPU != "" {
		fmt.Fprintf(&b, " (%s)", m.CPU)
	}
	if m.MemoryGiB > 0 {
		fmt.Fprintf(&b, ", %d GiB", m.MemoryGiB)
	}
	fmt.Fprintf(&b, ", Redis %s started for the run without persistence, client\n", res.Server)
	fmt.Fprintf(&b, "and server on loopback, %s. The machine is shared: its load average\n", m.Go)
	fmt.Fprintf(&b, "(1, 5, 15 min) was %s when the run started and %s when it ended, on\n", m.LoadStart, m.LoadEnd)
	b.WriteString("a machine of that many cores. Compare the ratios, which come from the same\n")
	b.WriteString("run, not the absolute figures. The libraries alternate which goes first\n")
	b.WriteString("from one measurement to the next.\n")
	return b.String()
}

func (d docs) comparison() string {
	return d.table("results", "| measurement | redeq | asynq | redeq/asynq | goal |\n|---|---:|---:|---:|---|\n",
		func(r row) string {
			rt := ""
			if ratioed(r.Unit) && r.Asynq != 0 {
				rt = fmt.Sprintf("%.2fx", ratio(r))
			}
			return fmt.Sprintf("| %s | %s | %s | %s | %s |", d.label(r), num(r.Redeq), num(r.Asynq), rt, d.goalCell(r))
		}, d.enqueueRounds())
}

// table renders the rows of section sec that did not fail, one line each,
// under header, then after (if any), then the section's failures.
func (d docs) table(sec, header string, line func(r row) string, after string) string {
	var b strings.Builder
	b.WriteString(header)
	for _, r := range d.res.Rows {
		if r.Failed == "" && section(r) == sec {
			b.WriteString(line(r) + "\n")
		}
	}
	b.WriteString(after)
	b.WriteString(d.failures(sec))
	return b.String()
}

// enqueueRounds says how the single-job enqueue rows were chosen.
func (d docs) enqueueRounds() string {
	if len(d.res.Enqueue) == 0 {
		return ""
	}
	one, ok1 := d.row("enqueue, 1 goroutine")
	sixteen, ok16 := d.row("enqueue, 16 goroutines")
	if !ok1 || !ok16 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nSingle-job enqueue ran in %d rounds on the same server, the two libraries\n", d.res.Sizes.Rounds)
	b.WriteString("taking turns within each round and alternating which goes first; each\n")
	b.WriteString("enqueue row shows the round with the median redeq/asynq ratio, and the\n")
	b.WriteString("per-job costs are medians over the rounds. Ratios of the rounds, 1\n")
	fmt.Fprintf(&b, "goroutine: %s; 16 goroutines: %s.\n", roundRatios(one.Comment), roundRatios(sixteen.Comment))
	return b.String()
}

// roundRatios is the list of ratios at the end of an enqueue row's comment.
func roundRatios(comment string) string {
	_, list, _ := strings.Cut(comment, "ratios ")
	return strings.ReplaceAll(list, " ", ", ")
}

func (d docs) lateness() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s jobs spread over %v, two consumers of 16 workers each; lateness is\n",
		num(float64(d.res.Sizes.Lateness)), d.res.Sizes.Spread)
	b.WriteString("the handler's start minus the job's due time. asynq runs twice: with its\n")
	b.WriteString("defaults (`DelayedTaskCheckInterval` 5 s, `TaskCheckInterval` 1 s) and\n")
	b.WriteString("tuned for low latency, both at 100 ms.")
	if k := d.res.Sizes.LatenessRounds; k > 1 {
		fmt.Fprintf(&b, " It runs %d rounds, the three taking\n", k)
		b.WriteString("turns within each and rotating which goes first: p50, p99, max and the\n")
		b.WriteString("chart are each one's median round by p99; the earliest start and the\n")
		b.WriteString("jobs run early count every round.")
	}
	b.WriteString("\n\n")
	b.WriteString("| | redeq | asynq, defaults | asynq, 100 ms checks | goal (redeq) |\n|---|---:|---:|---:|---|\n")
	for _, r := range d.res.Rows {
		if r.Failed != "" || section(r) != "lateness" {
			continue
		}
		tuned := ""
		if r.AsynqTuned != nil {
			tuned = num(*r.AsynqTuned)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", d.label(r), num(r.Redeq), num(r.Asynq), tuned, d.goalCell(r))
	}
	for _, r := range d.res.Rows {
		if r.Name == "lateness p99" && r.Failed == "" {
			if _, rounds, ok := strings.Cut(r.Comment, "the median round; "); ok {
				fmt.Fprintf(&b, "\nThe p99 of every round (%s).\n", rounds)
			}
		}
	}
	b.WriteString(d.failures("lateness"))
	if len(d.res.Lateness) > 0 {
		b.WriteString("\n![lateness](lateness.svg)\n")
	}
	return b.String()
}

func (d docs) alone() string {
	return d.table("alone", "| measurement | redeq | note |\n|---|---:|---|\n", func(r row) string {
		note := strings.ReplaceAll(r.Comment, "|", "\\|")
		if strings.HasPrefix(note, "[") {
			note = "`" + strings.Trim(note, "[]") + "`"
		}
		return fmt.Sprintf("| %s | %s | %s |", d.label(r), num(r.Redeq), note)
	}, "")
}

// overhead is the table of the overhead measurement.
func (d docs) overhead() string {
	return d.table("overhead", "| measurement | redeq | goal | note |\n|---|---:|---|---|\n", func(r row) string {
		return fmt.Sprintf("| %s | %s | %s | %s |", d.label(r), num(r.Redeq), d.goalCell(r), strings.ReplaceAll(r.Comment, "|", "\\|"))
	}, "")
}

func (d docs) ceiling() string {
	var b strings.Builder
	if len(d.res.Ceiling) > 0 {
		b.WriteString("`redis-benchmark` on the same server, 16 connections (commands/s):\n\n")
		b.WriteString("| | no pipelining | pipelines of 16 |\n|---|---:|---:|\n")
		for _, c := range d.res.Ceiling {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Command, num(c.Plain), num(c.Pipelined))
		}
	}
	b.WriteString(d.failures("ceiling"))
	return b.String()
}

func (d docs) run() string {
	var b strings.Builder
	b.WriteString("| measurement | took | load average at its start | result |\n|---|---:|---|---|\n")
	for _, m := range d.res.Measurements {
		result := "ok"
		if m.Failed != "" {
			result = "failed: " + strings.ReplaceAll(firstLine(m.Failed), "|", "\\|")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", m.Name, time.Duration(m.Seconds*float64(time.Second)).Round(time.Second), m.LoadStart, result)
	}
	return b.String()
}

// summary is the README's paragraph: the headline figures, each from the
// JSON, "n/a" where the measurement failed.
func (d docs) summary() string {
	get := func(name string) (row, bool) { return d.row(name) }
	x := func(name string) string {
		if r, ok := get(name); ok && r.Asynq != 0 {
			if ratio(r) < 1 {
				return fmt.Sprintf("%.2fx", ratio(r))
			}
			return fmt.Sprintf("%.1fx", ratio(r))
		}
		return "n/a"
	}
	v := func(name, sys string) string {
		r, ok := get(name)
		if !ok {
			return "n/a"
		}
		switch sys {
		case "asynq":
			return num(r.Asynq)
		case asynqTuned:
			if r.AsynqTuned == nil {
				return "n/a"
			}
			return num(*r.AsynqTuned)
		}
		return num(r.Redeq)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Against asynq on the same redis-server, from one run of `%s`\n", d.res.Command)
	fmt.Fprintf(&b, "(%s, %d cores, Redis %s; every figure, the chart and the machine's load:\n",
		d.res.When.Format("2006-01-02"), d.res.Machine.Nproc, d.res.Server)
	b.WriteString("[docs/performance.md](docs/performance.md)):\n")
	fmt.Fprintf(&b, "draining due jobs %s as fast, at %s Redis commands and %s µs of Redis CPU\n",
		x("drain"), v("redis commands per drained job", "redeq"), v("Redis CPU per drained job", "redeq"))
	fmt.Fprintf(&b, "per job (asynq %s and %s µs); lateness p99 %s ms (asynq %s ms with its\n",
		v("redis commands per drained job", "asynq"), v("Redis CPU per drained job", "asynq"),
		v("lateness p99", "redeq"), v("lateness p99", "asynq"))
	fmt.Fprintf(&b, "defaults, %s ms with its polling tuned to 100 ms), %s jobs run early\n",
		v("lateness p99", asynqTuned), v("jobs run early", "redeq"))
	fmt.Fprintf(&b, "(asynq tuned: %s); %s the memory per pending job; a `kill -9`'d\n",
		v("jobs run early", asynqTuned), x("memory per pending job"))
	fmt.Fprintf(&b, "consumer's jobs run again after %s s (asynq %s s, retries spent: %s);\n",
		v("recovery after kill -9", "redeq"), v("recovery after kill -9", "asynq"), v("retries spent by recovered jobs", "asynq"))
	fmt.Fprintf(&b, "`AddBatch` at %s asynq's enqueue. Single-job `Add` runs at %s asynq's\n",
		x("enqueue, batch of 100 (redeq AddBatch)"), x("enqueue, 1 goroutine"))
	fmt.Fprintf(&b, "from one goroutine and %s from 16.\n", x("enqueue, 16 goroutines"))
	if n := len(d.failedNames()); n > 0 {
		fmt.Fprintf(&b, "In this run %s failed; see the performance page.\n", strings.Join(d.failedNames(), ", "))
	}
	return b.String()
}

func (d docs) failedNames() []string {
	var names []string
	for _, m := range d.res.Measurements {
		if m.Failed != "" {
			names = append(names, m.Name)
		}
	}
	return names
}

// ledgerTable is the cost ledger: per step of a job's journey, each
// system's server time and commands per job, then the client's CPU.
func (d docs) ledgerTable() string {
	return d.table("ledger", "| step (redeq script; asynq's) | redeq | asynq | redeq/asynq |\n|---|---:|---:|---:|\n", func(r row) string {
		rt := ""
		if r.Asynq != 0 {
			rt = fmt.Sprintf("%.2fx", ratio(r))
		}
		label := strings.TrimPrefix(r.Name, "ledger ")
		label = strings.TrimPrefix(label, "ledger: ")
		if c, _, ok := strings.Cut(r.Comment, "; slow log"); ok {
			label += " (" + c + ")"
		} else if c, _, ok := strings.Cut(r.Comment, "; MONITOR"); ok {
			label += " (" + c + ")"
		}
		return fmt.Sprintf("| %s | %s | %s | %s |", label, num(r.Redeq), num(r.Asynq), rt)
	}, "")
}
