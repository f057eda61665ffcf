#!/usr/bin/env bash
# Fails when an import runs back up the job's journey. Each package of the
# core module has a layer; a package may import only packages of a lower
# layer (or its own test helpers). The facade (redeq) sits above the
# building blocks, the dashboard and the test kit for services above it.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/redeq-go/redeq
layer() {
  case "${1#"$mod"/}" in
  internal/keys | internal/env | internal/topiccache | internal/rdb) echo 0 ;;
  config) echo 1 ;;
  internal/testutil) echo 2 ;; # test helpers: below every building block that is not config
  internal/*) echo 0 ;;         # any other internal package: under everything
  pool | lock) echo 3 ;;
  bucket) echo 4 ;;
  ready | retry) echo 5 ;;
  ack) echo 6 ;;
  consumer) echo 7 ;;
  redeq) echo 8 ;;
  dashboard | redeqtest | redeqtest/*) echo 9 ;;
  examples/internal/*) echo 10 ;; # the examples' shared demo code
  examples/*) echo 11 ;;
  *) echo "" ;;
  esac
}
bad=0
while read -r pkg imports; do
  from=$(layer "$pkg")
  if [ -z "$from" ]; then
    echo "layers: $pkg has no layer in .ci/layers.sh" >&2
    bad=1
    continue
  fi
  for imp in $imports; do
    case "$imp" in "$mod"/*) ;; *) continue ;; esac
    to=$(layer "$imp")
    if [ "$imp" = "$mod/internal/testutil" ]; then
      continue # imported by tests only; go list -f .Imports lists no test imports
    fi
    if [ -z "$to" ] || [ "$to" -ge "$from" ]; then
      echo "layers: $pkg (layer $from) imports $imp (layer ${to:-none}): an arrow back up the journey" >&2
      bad=1
    fi
  done
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)
if [ "$bad" -ne 0 ]; then
  exit 1
fi
echo "layers: every import runs down the journey"
