#!/usr/bin/env bash
# The local single-node YARN cluster: install | start | stop | status (see yarn.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${WEIR_PYTHON:-$repo/.venv/bin/python}"
[[ -x "$py" ]] || py=python3
exec "$py" "$here/yarn.py" "$@"
