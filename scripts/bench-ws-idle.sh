#!/usr/bin/env bash
# Idle WebSocket bench (BENCHMARKS.md "Agent serving"): the daemon's extra resident memory for
# N concurrent idle WebSocket connections to one agent's WS route (issue 15: 1,000 under 50 MB).
#   ADF=target/release/adf scripts/bench-ws-idle.sh [connections]
# Needs python3 (standard library only: the client speaks the WebSocket handshake itself).
# Uses a temporary ADF_HOME and port 7396.
set -euo pipefail
# shellcheck source=lib/serving-agent.sh
source "$(dirname "$0")/lib/serving-agent.sh"
ADF=${ADF:-target/release/adf}
CONNECTIONS=${1:-1000}
PORT=${PORT:-7396}
make_workdir
ulimit -n "$((CONNECTIONS * 2 + 1024))" 2>/dev/null || true
cat > "$WORK/ws.ts" <<'TS'
export async function onEvent(event) {
  return event.type === "message" ? "echo " + event.data : null;
}
TS
serve_agent chat lib/ws.ts "$WORK/ws.ts" \
  '[{"method": "WS", "path": "/live", "lambda": "lib/ws.ts:onEvent", "warm": true}]'
echo "load: $(cat /proc/loadavg)"
python3 - "$PORT" "$CONNECTIONS" "$DAEMON" <<'PY'
import base64, os, socket, sys, time

port, count, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def rss_kb():
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS for the daemon")

def upgrade():
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /agents/chat/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit("the daemon closed a connection during the upgrade")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 101"):
        raise SystemExit("upgrade refused: " + answer.split(b"\r\n")[0].decode())
    return s

# One connection first, so the agent's slot, sandbox and warm context exist before the
# baseline: the figure is what each further idle connection costs.
first = upgrade()
time.sleep(1)
before = rss_kb()
sockets = [upgrade() for _ in range(count)]
time.sleep(2)
after = rss_kb()
extra_mb = (after - before) / 1024
print(f"idle WebSockets: {count}; daemon RSS before {before / 1024:.1f} MB, "
      f"after {after / 1024:.1f} MB, extra {extra_mb:.1f} MB "
      f"({(after - before) / count:.1f} KB per connection)")
for s in sockets:
    s.close()
first.close()
PY
echo "load: $(cat /proc/loadavg)"
