#!/usr/bin/env bash
# Agent serving bench (BENCHMARKS.md "Agent serving"): a route answered by a warm lambda vs the
# daemon's GET /health floor, both driven from this machine.
#   ADF=target/release/adf scripts/bench-serving.sh [seconds] [connections]
# By default wrk loads as fast as the daemon answers (saturation). RATE=N instead sends N
# requests/s on a fixed schedule with `adf bench http` (latency from each request's scheduled
# time, after a 2 s warm-up at the same rate; DRIVER=<adf binary> drives with another build
# than the daemon's, for comparisons with builds that have no `adf bench http`).
# SKIP_FLOOR=1 skips the /health run (repeated runs of the route alone); WARMUP=1 loads the
# route once for the same time, unmeasured, before the measured run (wrk only).
# Needs wrk (scripts/setup.d/40-wrk.sh). Uses a temporary ADF_HOME and port 7395.
set -euo pipefail
# shellcheck source=lib/serving-agent.sh
source "$(dirname "$0")/lib/serving-agent.sh"
ADF=${ADF:-target/release/adf}
SECONDS_EACH=${1:-10}
CONNECTIONS=${2:-32}
PORT=${PORT:-7395}
make_workdir
serve_hello_agent
curl -fs "http://127.0.0.1:$PORT/agents/web/hello" && echo
echo "load: $(cat /proc/loadavg)"
if [ -n "${RATE:-}" ]; then
  fixed_rate() {
    "${DRIVER:-$ADF}" bench http "$1" --rate "$RATE" --connections "$CONNECTIONS" --seconds "$SECONDS_EACH"
  }
  if [ -z "${SKIP_FLOOR:-}" ]; then
    echo "== GET /health (floor) at $RATE/s"
    fixed_rate "http://127.0.0.1:$PORT/health"
  fi
  echo "== GET /agents/web/hello (warm route lambda) at $RATE/s"
  fixed_rate "http://127.0.0.1:$PORT/agents/web/hello"
  echo "load: $(cat /proc/loadavg)"
  exit 0
fi
if [ -z "${SKIP_FLOOR:-}" ]; then
  echo "== GET /health (floor)"
  wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --latency "http://127.0.0.1:$PORT/health"
fi
if [ -n "${WARMUP:-}" ]; then
  echo "== warm-up (not measured)"
  wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" "http://127.0.0.1:$PORT/agents/web/hello" >/dev/null
fi
echo "== GET /agents/web/hello (warm route lambda)"
wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --latency "http://127.0.0.1:$PORT/agents/web/hello"
echo "load: $(cat /proc/loadavg)"
