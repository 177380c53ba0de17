#!/usr/bin/env bash
# adf-shell's table tests compare every row with real bash, GNU coreutils, grep, sed and jq.
set -euo pipefail
missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v diff >/dev/null 2>&1 || missing+=(diffutils)
command -v sed >/dev/null 2>&1 || missing+=(sed)
command -v grep >/dev/null 2>&1 || missing+=(grep)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
