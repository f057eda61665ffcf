#!/usr/bin/env bash
# Regenerates .ci/redeq-durations, from which .ci/run cuts the redeq
# package's tests into chunks, longest first, so that both lanes end
# together. It reads the -test.v logs a run of .ci/run leaves in its log
# folder (printed at its end; REDEQ_CI_LOG names it):
#   bash .ci/durations.sh /tmp/redeq-ci-log.XXXXXX > .ci/redeq-durations
# One line per top-level test, slowest first: its seconds, its name, and
# "p" when it runs beside the others (t.Parallel). A test no log names
# keeps its line from the current file, so a run of a few chunks by hand
# refreshes only what it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: bash .ci/durations.sh LOG_FOLDER... > .ci/redeq-durations" >&2
  exit 2
fi
logs=()
for d in "$@"; do
  for f in "$d"/redeq.*.log; do
    [ -f "$f" ] && logs+=("$f")
  done
done
if [ ${#logs[@]} -eq 0 ]; then
  echo "no redeq.*.log in $*" >&2
  exit 1
fi
old=.ci/redeq-durations
[ -f "$old" ] || old=/dev/null
awk '
  FILENAME == ARGV[1] { keep[$2] = $0; next } # the current file
  /^=== PAUSE / && $3 !~ /\// { par[$3] = 1 }
  # A test lasts as long as its longest run, its own or a subtest'"'"'s: a
  # test whose subtests run side by side reports 0 s for itself.
  /^ *--- (PASS|FAIL|SKIP): / {
    n = $3; sub(/\/.*/, "", n); s = $4; gsub(/[()s]/, "", s)
    if (!(n in dur) || s + 0 > dur[n] + 0) dur[n] = s
  }
  END {
    for (n in dur) printf "%.1f %s%s\n", dur[n], n, (n in par ? " p" : "")
    for (n in keep) if (!(n in dur)) print keep[n]
  }
' "$old" "${logs[@]}" | sort -k1,1gr -k2,2
