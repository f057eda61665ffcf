#!/usr/bin/env bash
# Starts and stops the Redis deployments the tests run against, all on
# loopback ports below 45000 in one temporary folder:
#   a standalone server, and a 3-master Redis Cluster.
# Source it, call redis_up, then read REDIS_ADDR and REDIS_CLUSTER_ADDRS;
# redis_down stops everything. Used by .ci/run; handy by hand too:
#   source .ci/redis.sh && redis_up && env | grep REDIS_
set -u

# redis_install installs redis-server and redis-tools with apt-get when
# either is missing, through sudo unless running as root, and checks the
# version: the cluster needs Redis 7 or later (--cluster-port).
redis_install() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "== installing redis-server and redis-tools"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      if ! command -v sudo >/dev/null; then
        echo "redis-server or redis-cli is missing, and installing them needs root or sudo" >&2
        return 1
      fi
      sudo="sudo"
    fi
    if ! command -v apt-get >/dev/null; then
      echo "redis-server or redis-cli is missing and there is no apt-get: install Redis 7 or later yourself" >&2
      return 1
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null || return 1
  fi
  local version
  version=$(redis-server --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')
  if [ -z "$version" ] || [ "${version%%.*}" -lt 7 ]; then
    echo "redis-server ${version:-of unknown version} is too old: the tests' cluster needs Redis 7 or later" \
      "(redis-server --cluster-port). Install Redis 7 (Debian 12 / Ubuntu 24.04 apt, or packages.redis.io)." >&2
    return 1
  fi
}

# free_port START: the first port from START on that nothing listens on.
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || [[ " ${REDEQ_USED_PORTS:-} " == *" $p "* ]]; do
    p=$((p + 1))
  done
  REDEQ_USED_PORTS="${REDEQ_USED_PORTS:-} $p"
  echo "$p"
}

# start_node DIR PORT [extra redis-server arguments...]
start_node() {
  local dir=$1 port=$2
  shift 2
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save '' --appendonly no "$@"
  REDEQ_PORTS="${REDEQ_PORTS:-} $port"
  for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "redis on port $port did not start:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

redis_up() {
  redis_install || return 1
  REDEQ_REDIS_DIR=$(mktemp -d /tmp/redeq-ci.XXXXXX)
  export REDEQ_REDIS_DIR
  # Client and cluster-bus ports both come from 20000..~30500, below 45000.
  local base=$((20000 + RANDOM % 10000))
  local port
  port=$(free_port "$base")
  start_node "$REDEQ_REDIS_DIR/standalone" "$port" || return 1
  export REDIS_ADDR="127.0.0.1:$port"

  local nodes=() bus
  for i in 1 2 3; do
    port=$(free_port $((base + 100 + i)))
    bus=$(free_port $((base + 200 + i)))
    start_node "$REDEQ_REDIS_DIR/cluster$i" "$port" --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file nodes.conf --cluster-node-timeout 2000 || return 1
    nodes+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$REDEQ_REDIS_DIR/create.log" 2>&1 || {
    cat "$REDEQ_REDIS_DIR/create.log" >&2
    return 1
  }
  for n in "${nodes[@]}"; do
    for _ in $(seq 100); do
      redis-cli -h "${n%:*}" -p "${n#*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
      sleep 0.1
    done
  done
  REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${nodes[*]}")
  export REDIS_CLUSTER_ADDRS
  echo "== redis: standalone $REDIS_ADDR, cluster $REDIS_CLUSTER_ADDRS"
}

redis_down() {
  for p in ${REDEQ_PORTS:-}; do
    redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
  done
  REDEQ_PORTS=""
  if [ -n "${REDEQ_REDIS_DIR:-}" ]; then
    for f in "$REDEQ_REDIS_DIR"/*/redis.pid; do
      [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
    rm -rf "$REDEQ_REDIS_DIR"
  fi
}
