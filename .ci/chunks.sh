#!/usr/bin/env bash
# chunks.sh DURATIONS DIR: cuts the test names on stdin into chunks for
# .ci/run's lanes, written to DIR/names.001, DIR/names.002, ... longest
# first, each with its estimated seconds in names.NNN.seconds. DURATIONS
# is .ci/redeq-durations (see durations.sh). Tests that run one after
# another fill a chunk until it reaches seq_target seconds (a longer test
# has one of its own); tests that run beside each other ("p") fill a
# chunk until their sum reaches par_target, a chunk of them lasting about
# its longest, or their sum over par_overlap. A test the file does not name counts as unknown_seconds, more
# than seq_target: it has a chunk of its own, among the first, so that an
# unmeasured long test cannot be last.
#   go test -list . ./redeq | grep ^Test | bash .ci/chunks.sh .ci/redeq-durations /tmp/x
set -euo pipefail
durations=$1 dir=$2
[ -f "$durations" ] || durations=/dev/null
mkdir -p "$dir"
awk -v d="$dir" -v seq_target=20 -v par_target=60 -v par_overlap=3 -v unknown_seconds=30 '
    FILENAME == ARGV[1] { dur[$2] = $1; par[$2] = ($3 == "p"); next }
    {
      s = ($1 in dur) ? dur[$1] : unknown_seconds
      if (par[$1]) { np++; pn[np] = $1; ps[np] = s } else { ns++; sn[ns] = $1; ss[ns] = s }
    }
    # sort_desc: indexes of v[1..n] by value, largest first, into o.
    function sort_desc(v, n, o,   i, j, k) {
      for (i = 1; i <= n; i++) o[i] = i
      for (i = 2; i <= n; i++) {
        k = o[i]
        for (j = i - 1; j >= 1 && v[o[j]] < v[k]; j--) o[j + 1] = o[j]
        o[j + 1] = k
      }
    }
    END {
      # Tests that run one after another: longest first, a chunk ending
      # once it reaches seq_target seconds.
      sort_desc(ss, ns, so)
      for (i = 1; i <= ns; i++) {
        if (c == 0 || cs[c] >= seq_target) { c++; cs[c] = 0 }
        cs[c] += ss[so[i]]; names[c] = names[c] sn[so[i]] "\n"
      }
      # Tests that run beside each other: longest first, a chunk ending
      # once their sum reaches par_target seconds; it lasts about its
      # longest, or its sum over par_overlap when they are many.
      sort_desc(ps, np, po)
      for (i = 1; i <= np; i++) {
        if (i == 1 || psum >= par_target) { c++; cs[c] = ps[po[i]]; psum = 0 }
        psum += ps[po[i]]
        if (psum / par_overlap > cs[c]) cs[c] = psum / par_overlap
        names[c] = names[c] pn[po[i]] "\n"
      }
      sort_desc(cs, c, co)
      for (i = 1; i <= c; i++) {
        f = sprintf("%s/names.%03d", d, i)
        printf "%s", names[co[i]] > f
        close(f)
        printf "%.0f\n", cs[co[i]] > (f ".seconds")
        close(f ".seconds")
      }
    }
' "$durations" -
