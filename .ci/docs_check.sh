#!/usr/bin/env bash
# The docs site, as a reader gets it: built with warnings as errors (mkdocs
# --strict), served on 127.0.0.1, and checked in headless Chromium from
# Debian's packages (.ci/docs_browser.py): every page loads with its
# stylesheets, scripts and images, no internal link or #anchor is broken, no
# code block is cut (a block wider than its box must scroll, with room for the
# scroll bar, or wrap) and copying a block gives its code as written, at a
# desktop and a phone width. The checker first proves on a planted test site
# that it finds each kind of problem. Writes a screenshot of a guide page and
# prints its path.
#
# Usage: .ci/docs_check.sh        (from anywhere; about 20 s once installed)
#   VENV=DIR        the virtual environment (default .venv; made, and the
#                   docs extra installed, where mkdocs is missing)
#   SCREENSHOT=FILE where to write the PNG (default: a new temporary directory)
# Installs chromium with apt-get where /usr/bin/chromium is missing (as root,
# or through sudo). The check itself needs no network: the browser resolves
# no host but 127.0.0.1 (the theme's web fonts fall back to local ones).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/mkdocs" ]; then
  echo "== installing the docs extra into $VENV"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -e ".[docs]"
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian's chromium"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

site=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$site"
}
trap cleanup EXIT

echo "== mkdocs build --strict"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet -d "$site"

port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$VENV/bin/python" -m http.server "$port" --bind 127.0.0.1 --directory "$site" >/dev/null 2>&1 &
server=$!
"$VENV/bin/python" - "$port" <<'EOF'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("the site's server did not start")
EOF

screenshot=${SCREENSHOT:-$(mktemp -d)/guide-sweeps.png}
echo "== headless Chromium: $(/usr/bin/chromium --version 2>/dev/null)"
"$VENV/bin/python" .ci/docs_browser.py "http://127.0.0.1:$port/" \
  --chromium /usr/bin/chromium --screenshot "$screenshot" --screenshot-page guide/sweeps/
echo "== docs check passed in $((SECONDS - start)) s; screenshot of guide/sweeps: $screenshot"
