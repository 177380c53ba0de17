# Sourced by the serving benches: one agent with routes, served by `adf daemon` on $PORT.
# The caller sets ADF and PORT, then calls make_workdir.

# Makes $WORK, a temporary directory removed (with the daemon stopped) when the script exits,
# and points ADF_HOME into it.
make_workdir() {
  WORK=$(mktemp -d)
  trap 'kill "${DAEMON:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  export ADF_HOME="$WORK/home"
}

# Writes the warm `GET /hello` route's lambda source to $WORK/routes.ts.
write_hello_route() {
  cat > "$WORK/routes.ts" <<'TS'
export async function hello(req) {
  return { status: 200, body: "hello from " + req.path };
}
TS
}

# serve_agent NAME LIB_PATH SOURCE ROUTES_JSON: creates $WORK/NAME.adf with SOURCE at LIB_PATH,
# handle NAME and serving.api ROUTES_JSON, starts the daemon on it (DAEMON is its pid, its log
# $WORK/daemon.log) and returns once the daemon answers GET /health.
serve_agent() {
  local name=$1 lib_path=$2 source=$3 routes=$4
  "$ADF" new "$WORK/$name.adf" --name "$name" >/dev/null
  "$ADF" put "$WORK/$name.adf" "$lib_path" "$source" >/dev/null
  "$ADF" config set "$WORK/$name.adf" handle "$name" >/dev/null
  "$ADF" config set "$WORK/$name.adf" serving.api "$routes" >/dev/null
  "$ADF" daemon --port "$PORT" "$WORK/$name.adf" >"$WORK/daemon.log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 1 100); do
    if ! kill -0 "$DAEMON" 2>/dev/null; then
      echo "the daemon exited (is port $PORT taken by another?); its log: $WORK/daemon.log" >&2
      cat "$WORK/daemon.log" >&2
      return 1
    fi
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the daemon did not answer on port $PORT; its log: $WORK/daemon.log" >&2
  return 1
}

# The `web` agent with the warm `GET /hello` route, served as serve_agent does.
serve_hello_agent() {
  write_hello_route
  serve_agent web lib/routes.ts "$WORK/routes.ts" \
    '[{"method": "GET", "path": "/hello", "lambda": "lib/routes.ts:hello", "warm": true}]'
}
