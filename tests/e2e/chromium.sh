#!/usr/bin/env sh
# Is there a Chromium for the browser tests? Used by `make test` / `make e2e`.
#   exit 0: yes ($E2E_CHROMIUM, default /usr/bin/chromium), possibly just installed with apt-get (as root);
#   exit 1: no, and CI=true: a missing browser is a failure there;
#   exit 3: no (not root, or apt-get failed): the caller skips the browser tests with a message.
# Playwright is not asked to download a browser: Debian's package (or the CI runner's) is used.
browser="${E2E_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$browser" ]; then
    exit 0
fi
if [ "$browser" = /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "browser tests: installing Debian's chromium with apt-get (about a minute) ..."
    if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
            && [ -x "$browser" ]; then
        exit 0
    fi
    echo "browser tests: apt-get could not install chromium"
fi
if [ "${CI:-}" = true ]; then
    echo "browser tests: no Chromium at $browser and CI=true: failing (install it, or set E2E_CHROMIUM)" >&2
    exit 1
fi
echo "browser tests: SKIPPED, no Chromium at $browser (apt-get install chromium, or set E2E_CHROMIUM=/path/to/chrome)"
exit 3
