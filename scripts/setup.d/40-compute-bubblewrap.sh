#!/usr/bin/env bash
# adf-compute's isolated and shared targets run programs under bubblewrap (bwrap); its tests
# run python3, sh and coreutils inside it (the system python3 in /usr/bin, with venv for pip).
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
bwrap --version >/dev/null
