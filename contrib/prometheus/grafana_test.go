package redeqprom_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
)

// registered returns the series names a Collector exports: each metric
// name, and a histogram's _bucket, _sum and _count.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	col := redeqprom.New(c, redeqprom.Options{})
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Delay: time.Hour}))
	// Every vector gets a child, so that Gather lists it.
	job := &redeq.Job{Topic: "t", ID: "1"}
	col.JobAdded("t")
	col.JobDelivered(job, time.Millisecond)
	col.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
	col.JobsReturned("t", 1, true)
	require.NoError(t, c.PutSchedule(ctx, redeq.Schedule{Name: "s", Topic: "t", Spec: "@hourly"}))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and groupings are
// taken out, that are neither functions (followed by "(") nor keywords.
func metricNames(expr string) []string {
	e := promString.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the tail of a number such as 1e3
		}
		if strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " "), "(") || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (topic, le) (rate(redeq_job_lateness_seconds_bucket{topic=~"$topic", first_attempt="true"}[5m])))`: {"redeq_job_lateness_seconds_bucket"},
		`max by (topic) (delta(redeq_jobs{state="dead"}[1h])) > 0 and on (topic) redeq_consumers`:                                           {"redeq_jobs", "redeq_consumers"},
		`rate(a_total[5m]) / ignoring (outcome) rate(b_total{x="rate(c)"}[5m]) * 1e3`:                                                       {"a_total", "b_total"},
	} {
		require.Equal(t, want, metricNames(expr), expr)
	}
}

// grafanaExprs returns every PromQL expression of a dashboard: the
// panels' targets and the query variables (label_values(metric, label)).
func grafanaExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var exprs []string
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	lv := regexp.MustCompile(`^label_values\(\s*([^,]+),\s*[a-zA-Z_]+\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		require.NoError(t, json.Unmarshal(v.Query, &q))
		m := lv.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable query %q", q.Query)
		exprs = append(exprs, m[1])
	}
	return exprs
}

// Every query of the Grafana dashboard selects only series the Collector
// exports, so that renaming a metric breaks this test, not the dashboard.
// The dashboard also shows what the alerts of docs/observability.md watch.
func TestGrafanaDashboardNamesOnlyExportedMetrics(t *testing.T) {
	names := registered(t)
	used := map[string]bool{}
	for _, expr := range grafanaExprs(t, "grafana.json") {
		got := metricNames(expr)
		require.NotEmpty(t, got, "%s selects no metric", expr)
		for _, n := range got {
			require.True(t, names[n], "%s: %s is not exported by the collector", expr, n)
			used[n] = true
		}
	}
	for _, n := range []string{"redeq_job_lateness_seconds_bucket", "redeq_jobs", "redeq_jobs_processed_total", "redeq_oldest_overdue_seconds",
		"redeq_schedule_ticks_total", "redeq_schedule_lag_seconds", "redeq_schedule_last_tick_timestamp_seconds"} {
		require.True(t, used[n], "the dashboard shows %s", n)
	}
}

// Every expression of alerts.yml selects only series the Collector
// exports, and the rules cover the alerts docs/observability.md
// recommends (promtool, in .ci/run, tests that each one fires).
func TestAlertRulesNameOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &rules))
	names := registered(t)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			got := metricNames(r.Expr)
			require.NotEmpty(t, got, "%s selects no metric", r.Alert)
			for _, n := range got {
				require.True(t, names[n], "%s: %s is not exported by the collector", r.Alert, n)
			}
		}
	}
	require.ElementsMatch(t, []string{"RedeqJobsOverdue", "RedeqDueWorkWithoutConsumer", "RedeqLatenessHigh",
		"RedeqDeadJobsRising", "RedeqJobsRecovered", "RedeqUnAckParked", "RedeqRetryRatioHigh", "RedeqScrapeErrors",
		"RedeqScheduleBehind", "RedeqScheduleTicksSkipped"}, alerts)
}
