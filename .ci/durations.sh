#!/usr/bin/env bash
# Regenerates .ci/redeq-durations, from which .ci/run cuts the redeq
# package's tests into chunks, longest first, so that both lanes end
# together. It reads the -test.v logs a run of .ci/run leaves in its log
# folder (printed at its end; REDEQ_CI_LOG names it), and rewrites the file:
#   bash .ci/durations.sh /tmp/redeq-ci-log.XXXXXX
# One line per top-level test, slowest first: its seconds, its name, and
# "p" when it runs beside the others (t.Parallel). A test no log names
# keeps its line from the current file, so a run of a few chunks by hand
# refreshes only what it ran; of several logs, the later ones win.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: bash .ci/durations.sh LOG_FOLDER..." >&2
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
out=.ci/redeq-durations
old=$out
[ -f "$old" ] || old=/dev/null
awk '
  FILENAME == ARGV[1] { keep[$2] = $0; next } # the current file
  /^=== PAUSE / && $3 !~ /\// { paused[FILENAME, $3] = 1 }
  # A test lasts as long as its longest run, its own or one of its subtests (a test
  # whose subtests run side by side reports 0 s for itself); a later log
  # replaces what an earlier one said of the test.
  /^ *--- (PASS|FAIL|SKIP): / {
    n = $3; sub(/\/.*/, "", n); s = $4; gsub(/[()s]/, "", s)
    if (!((FILENAME, n) in seen)) {
      seen[FILENAME, n] = 1; dur[n] = s; par[n] = ((FILENAME, n) in paused)
    } else if (s + 0 > dur[n] + 0) dur[n] = s
  }
  END {
    for (n in dur) printf "%.1f %s%s\n", dur[n], n, (par[n] ? " p" : "")
    for (n in keep) if (!(n in dur)) print keep[n]
  }
'  "$old" "${logs[@]}" | sort -k1,1gr -k2,2 >"$out.new"
mv "$out.new" "$out"
echo "$out: $(wc -l <"$out") tests, from ${#logs[@]} logs" >&2
