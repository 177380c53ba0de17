# Sourced by the serving benches: one agent with routes, served by `adf daemon` on $PORT.
# The caller sets ADF, PORT and WORK (a temporary directory it removes) and exports ADF_HOME.

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
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the daemon did not answer on port $PORT; its log: $WORK/daemon.log" >&2
  return 1
}
