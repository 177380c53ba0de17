#!/usr/bin/env bash
# Where a warm route's requests wait (BENCHMARKS.md "Issue 15 follow-up: where the lane waits"):
# the setup of scripts/bench-serving.sh, a fill run (unmeasured) so the log table and the WAL
# reach their steady size, then one measured wrk run that also reports
#   - bytes the daemon sent to storage per request (/proc/<pid>/io write_bytes),
#   - WAL frames per commit in the WAL as it stands after the run (python3, standard library),
#   - with STACKS=1, the kernel stacks of daemon threads caught blocked (state D), by thread
#     name, sampled from /proc/<pid>/task/*/stack while wrk runs (needs root; the sampling
#     loop takes some CPU, so compare runs made the same way),
#   - with SYNCS=1, the fsync/fdatasync calls of each daemon thread during the run and how
#     many took 5 ms or more (perf trace; needs root and perf).
#   ADF=target/release/adf scripts/serving-stalls.sh [seconds] [connections]
# FILL=<seconds> sets the fill run (default 3). Needs wrk (scripts/setup.d/40-wrk.sh).
set -euo pipefail
# shellcheck source=lib/serving-agent.sh
source "$(dirname "$0")/lib/serving-agent.sh"
ADF=${ADF:-target/release/adf}
SECONDS_EACH=${1:-10}
CONNECTIONS=${2:-32}
PORT=${PORT:-7398}
make_workdir
serve_hello_agent
URL="http://127.0.0.1:$PORT/agents/web/hello"
curl -fs "$URL" >/dev/null
wrk -t2 -c"$CONNECTIONS" -d"${FILL:-3}s" "$URL" >/dev/null
echo "load: $(cat /proc/loadavg)"
written_before=$(awk '/^write_bytes/ {print $2}' "/proc/$DAEMON/io")
if [ -n "${STACKS:-}" ]; then
  (
    end=$((SECONDS + SECONDS_EACH))
    while [ $SECONDS -lt $end ]; do
      for task in /proc/"$DAEMON"/task/*; do
        if [ "$(awk '{print $3}' "$task/stat" 2>/dev/null)" = "D" ]; then
          echo "== $(cat "$task/comm")"
          cat "$task/stack"
        fi
      done 2>/dev/null
    done
  ) >"$WORK/stacks.txt" &
  SAMPLER=$!
fi
if [ -n "${SYNCS:-}" ]; then
  perf trace -e fsync,fdatasync -p "$DAEMON" -o "$WORK/syncs.txt" -- sleep "$SECONDS_EACH" \
    >/dev/null 2>&1 &
  TRACER=$!
fi
result=$(wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --latency "$URL")
written_after=$(awk '/^write_bytes/ {print $2}' "/proc/$DAEMON/io")
echo "$result" | grep -E "Latency  |99%|requests in|Requests/sec"
requests=$(echo "$result" | awk '/requests in/ {print $1}')
echo "written to storage: $(( (written_after - written_before) / 1048576 )) MiB," \
  "$(( (written_after - written_before) / requests )) bytes a request"
python3 - "$WORK/web.adf-wal" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
page_size = struct.unpack(">I", data[8:12])[0]
salts = data[16:24]
offset, frames, commits = 32, 0, 0
while offset + 24 + page_size <= len(data) and data[offset + 8:offset + 16] == salts:
    frames += 1
    commits += struct.unpack(">I", data[offset + 4:offset + 8])[0] != 0
    offset += 24 + page_size
print(f"WAL now: {frames} frames in {commits} commits, "
      f"{frames / max(commits, 1):.1f} frames a commit")
PY
if [ -n "${STACKS:-}" ]; then
  wait "$SAMPLER"
  echo "blocked samples by thread and kernel stack (most frequent first):"
  awk '/^== / {if (s) print s; s = $2 ":"; next} {sub(/\+0x.*/, "", $2); s = s " " $2} END {if (s) print s}' \
    "$WORK/stacks.txt" | sort | uniq -c | sort -rn | head -8
fi
if [ -n "${SYNCS:-}" ]; then
  wait "$TRACER" || true
  echo "syncs by thread (perf trace):"
  python3 - "$WORK/syncs.txt" <<'PY'
import collections, re, sys
calls, slow = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    found = re.search(r"\(\s*([0-9.]+) ms\):\s*(\S+?)/\d+ (fsync|fdatasync)\(", line)
    if found:
        calls[found.group(2)] += 1
        slow[found.group(2)] += float(found.group(1)) >= 5
for thread, count in calls.most_common():
    print(f"  {thread}: {count}, {slow[thread]} of them 5 ms or more")
PY
fi
echo "load: $(cat /proc/loadavg)"
