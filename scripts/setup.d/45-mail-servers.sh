#!/usr/bin/env bash
# The email adapter's tests (adf-testkit's mail.rs) start private Dovecot (IMAP + LMTP + auth)
# and Postfix (SMTP submission) instances on 127.0.0.1 per test; this installs the binaries.
# The system-wide services are not used: they are stopped and kept from starting.
set -euo pipefail
need=()
command -v /usr/sbin/dovecot >/dev/null 2>&1 || need+=(dovecot-imapd dovecot-lmtpd)
command -v /usr/sbin/postfix >/dev/null 2>&1 || need+=(postfix)
if [ "${#need[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
  echo "postfix postfix/mailname string localhost" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The packages' own daemons would hold ports 25/143; the tests need none of them.
for service in dovecot postfix; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$service" 2>/dev/null; then
    systemctl stop "$service" || true
  fi
done
