#!/usr/bin/env bash
# The production profile's servers on this machine: PostgreSQL (Airflow's metadata DB, Celery's
# result backend and Weir's control store) and Redis (Celery's broker), both Debian's packages,
# each its own instance on 127.0.0.1 with its data, socket, pid and log under WEIR_HOME.
#
#   services.sh install   apt-get the packages when missing (as root; else a one-line error)
#   services.sh start     initdb on first use, start both, create the databases; idempotent
#   services.sh stop      stop both (PostgreSQL with a fast shutdown), leaving the data
#   services.sh status    one line per server; exit 0 only when both answer
#   services.sh url       the control store's URL (WEIR_CONTROL_STORE), for scripts and tests
#
# Ports: WEIR_PG_PORT (default 54329) and WEIR_REDIS_PORT (default 63799), never the system's
# 5432/6379. PostgreSQL refuses to run as root: as root its cluster belongs to the `postgres` OS
# user (WEIR_HOME must then be traversable by it); otherwise to the calling user. Connections
# from 127.0.0.1 and the socket are trusted (a single-machine profile; see the README).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WEIR_HOME="${WEIR_HOME:-$REPO/.weir}"
PG_PORT="${WEIR_PG_PORT:-54329}"
REDIS_PORT="${WEIR_REDIS_PORT:-63799}"
PG_BIN="${WEIR_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
PG_ROOT="$WEIR_HOME/postgres"
PG_DATA="$PG_ROOT/data"
PG_LOG="$PG_ROOT/postgres.log"
PG_USER=weir
REDIS_DIR="$WEIR_HOME/redis"
DATABASES=(airflow weir)

die() { echo "services: $*" >&2; exit 2; }

# As root PostgreSQL runs as `postgres`; a normal user runs it as themself.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install() {
  if [ -x "${PG_BIN:-/nonexistent}/postgres" ] && command -v redis-server >/dev/null; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "PostgreSQL and Redis are missing: run 'apt-get install -y postgresql redis-server' as root"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q postgresql redis-server >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q postgresql redis-server >/dev/null; }
}

pg_running() { [ -n "$PG_BIN" ] && "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER"; }
redis_running() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

start_postgres() {
  [ -x "${PG_BIN:-/nonexistent}/postgres" ] || die "PostgreSQL is not installed: run 'make setup' (as root) first"
  mkdir -p "$PG_ROOT"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$PG_ROOT"
    runuser -u postgres -- test -x "$PG_ROOT" \
      || die "the postgres user cannot reach $PG_ROOT: give it search (x) permission on every folder above"
  fi
  if [ ! -s "$PG_DATA/PG_VERSION" ]; then
    as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U "$PG_USER" --auth=trust -E UTF8 --no-instructions >"$PG_ROOT/initdb.log"
  fi
  if ! pg_running; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 start \
      -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PG_ROOT -c max_connections=200" >/dev/null \
      || die "PostgreSQL did not start; see $PG_LOG"
  fi
  local db
  for db in "${DATABASES[@]}"; do
    "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 \
      || "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" "$db"
  done
}

start_redis() {
  command -v redis-server >/dev/null || die "Redis is not installed: run 'make setup' (as root) first"
  mkdir -p "$REDIS_DIR"
  redis_running && return 0
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$REDIS_DIR" --daemonize yes \
    --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" --appendonly yes \
    --save "" --protected-mode yes
  for _ in $(seq 50); do redis_running && return 0; sleep 0.2; done
  die "Redis did not start; see $REDIS_DIR/redis.log"
}

stop_postgres() {
  if [ -s "$PG_DATA/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null || true
  fi
}

stop_redis() {
  if redis_running; then
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  fi
  if [ -s "$REDIS_DIR/redis.pid" ]; then
    local pid; pid="$(cat "$REDIS_DIR/redis.pid")"
    # Gone, or a zombie nobody reaps (a daemon's parent in a container may be a PID 1 that never waits).
    for _ in $(seq 50); do
      case "$(ps -o stat= -p "$pid" 2>/dev/null)" in ""|Z*) break ;; esac
      sleep 0.2
    done
    rm -f "$REDIS_DIR/redis.pid"
  fi
}

status() {
  local rc=0
  if pg_running; then echo "postgresql running: 127.0.0.1:$PG_PORT, data $PG_DATA"
  else echo "postgresql stopped (port $PG_PORT)"; rc=1; fi
  if redis_running; then echo "redis running: 127.0.0.1:$REDIS_PORT, data $REDIS_DIR"
  else echo "redis stopped (port $REDIS_PORT)"; rc=1; fi
  return $rc
}

case "${1:-}" in
  install) install ;;
  start) start_postgres; start_redis ;;
  stop) stop_redis; stop_postgres ;;
  status) status ;;
  url) echo "postgresql://$PG_USER@127.0.0.1:$PG_PORT/weir" ;;
  *) echo "usage: $0 install|start|stop|status|url" >&2; exit 2 ;;
esac
