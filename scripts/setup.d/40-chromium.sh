#!/usr/bin/env bash
# The Studio's browser test (adf-server tests/studio_browser.rs) drives Debian's Chromium
# through the packaged chromedriver: nothing downloads a driver or a browser at test time.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver
