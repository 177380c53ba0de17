#!/usr/bin/env bash
# The crypto interop tests check our output with an independent implementation.
set -euo pipefail
if ! python3 -c "import cryptography" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check cryptography
fi
