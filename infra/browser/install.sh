#!/usr/bin/env bash
# Debian's Chromium for the cockpit's browser test (tests/airflow/test_cockpit_browser.py), driven
# by Playwright for Python (requirements.txt). Playwright's own browser download cannot reach its
# host from here, so the test launches /usr/bin/chromium. Idempotent: nothing to do when present.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [[ -x "$CHROMIUM" ]]; then
  exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
  echo "infra/browser/install.sh: $CHROMIUM is missing; as root run: apt-get install -y chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
test -x "$CHROMIUM"
