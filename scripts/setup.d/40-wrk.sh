#!/usr/bin/env bash
# The serving bench (BENCHMARKS.md "Agent serving") drives the daemon with wrk.
set -euo pipefail
if ! command -v wrk >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq wrk >/dev/null
fi
