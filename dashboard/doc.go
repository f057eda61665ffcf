// Package dashboard is a web page for the operators of redeq: every topic
// with its counts, how long its oldest due job has waited (the server's
// clock), a "no consumer" flag on a topic with due work and no consumer,
// and its last hour charted (jobs processed and failed,
// lateness p50 and p99, per minute, as SVG drawn on the server), a topic's
// jobs by state (in flight: each job's consumer and how long it has run),
// the consumers (/consumers: client name, host, pid, uptime, heartbeat,
// topics, the jobs each holds), the Redis servers (/redis: version, memory,
// the prefix's keys by a bounded scan), one job with its body, and the
// admin actions (delete, run
// now, requeue, pause, resume; requeue or delete of the dead or un-acked
// jobs selected, purge of the dead set; delete, pause, resume, bulk
// actions and purge after a confirmation page), and the periodic
// schedules (/schedules: topic, spec, zone, next and last tick, paused,
// skipped; pause, resume and delete after a confirmation). The overview searches
// topics (?q=) and sorts them (?sort=name, ready, dead or overdue); any
// reading page refreshes itself with ?refresh=N seconds (a meta tag, a
// link turns it off). Each action taken logs one line through
// Options.Logger: who, what, topic, how many jobs, result; its outcome
// shows from a cookie the handler signed, never from the address.
//
// It is an http.Handler built on the redeq client's public API and the
// standard library only; its templates and stylesheet are embedded, so it
// works offline and runs no script in the browser.
//
//	h := dashboard.New(c, dashboard.Options{Token: os.Getenv("REDEQ_DASHBOARD_TOKEN"), Path: "/redeq"})
//	http.Handle("/redeq/", h)
//
// It is safe by default where it can be: with Token or Username set every
// request must carry them; ReadOnly refuses every action on the server,
// not only by hiding buttons; actions need a CSRF token bound to the
// browser session and a same-origin request; every id, body and error is
// escaped; and each page reads at most MaxPageSize jobs. With no Token and
// no Username anyone who reaches it can act on the queues: mount it behind
// the service's own authentication, or set one.
package dashboard
