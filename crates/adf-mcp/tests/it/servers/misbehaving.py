#!/usr/bin/env python3
"""A minimal MCP server over stdio (JSON-RPC lines, standard library only) whose tools
misbehave on purpose: the tests of crashes, hangs, malformed results, schema changes and
the child's environment run against it.

Its `echo` schema is read from `schema.json` in the working directory (the scratch directory
the runtime gives it) when present, so a test changes a schema between two runs. `wait`
answers only when a `notifications/cancelled` names it (it writes `waiting.json` when the call
arrives), and every cancellation is appended to `cancelled.jsonl` there."""
import json
import os
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def echo_schema():
    try:
        with open("schema.json") as f:
            return json.load(f)
    except OSError:
        return {"type": "object", "properties": {"text": {"type": "string"}}}


def tools():
    return [
        {"name": "echo", "description": "Echoes text.", "inputSchema": echo_schema()},
        {"name": "env", "description": "Lists its environment variable names.", "inputSchema": {"type": "object"}},
        {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
        {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}},
        {"name": "malformed", "description": "Answers with a malformed result.", "inputSchema": {"type": "object"}},
        {"name": "image", "description": "Answers with an image.", "inputSchema": {"type": "object"}},
        {"name": "fail", "description": "Answers isError.", "inputSchema": {"type": "object"}},
        {"name": "wait", "description": "Answers only when cancelled.", "inputSchema": {"type": "object"}},
    ]


print("misbehaving server started pid=%d" % os.getpid(), file=sys.stderr, flush=True)
waiting = []
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    method = request.get("method")
    rid = request.get("id")
    if rid is None:
        # Notifications: a cancellation is recorded in the working directory, for the tests.
        if method == "notifications/cancelled":
            with open("cancelled.jsonl", "a") as f:
                f.write(json.dumps(request.get("params") or {}) + "\n")
            rid_cancelled = (request.get("params") or {}).get("requestId")
            if rid_cancelled is not None and rid_cancelled in waiting:
                waiting.remove(rid_cancelled)
                send({"jsonrpc": "2.0", "id": rid_cancelled, "error": {"code": -32800, "message": "cancelled"}})
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "misbehaving", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools()}})
    elif method == "tools/call":
        name = request["params"]["name"]
        args = request["params"].get("arguments") or {}
        print("call %s" % name, file=sys.stderr, flush=True)
        if name == "echo":
            text = args.get("text", "")
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "echo: " + text}]}})
        elif name == "env":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": json.dumps({"names": sorted(os.environ.keys()), "cwd": os.getcwd(), "token": os.environ.get("API_TOKEN")})}]}})
        elif name == "hang":
            time.sleep(3600)
        elif name == "crash":
            os._exit(3)
        elif name == "malformed":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
        elif name == "image":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "a dot"}, {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}})
        elif name == "wait":
            # No answer until a notifications/cancelled names this request.
            waiting.append(rid)
            with open("waiting.json", "w") as f:
                json.dump({"id": rid}, f)
        elif name == "fail":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "it went wrong"}], "isError": True}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "unknown tool " + name}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
