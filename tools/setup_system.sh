#!/usr/bin/env bash
# Debian packages the test suite needs beyond Python and Java: Chromium (the UI walked in a real
# browser), PostgreSQL (a production-like Dagster instance) and nginx (the TLS endpoint of the
# token-checked Spark Connect server). Installs only what is missing, as root or with
# password-less sudo; elsewhere it says so and the tests that need a package skip with that
# reason. Called by `make test`.
set -uo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
# nginx: the TLS endpoint in front of the token-checked Spark Connect server (secured tests).
{ command -v nginx || [ -x /usr/sbin/nginx ]; } >/dev/null 2>&1 || need+=(nginx)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
    sudo=()
elif sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "setup: ${need[*]} missing and no root: the browser/PostgreSQL tests will skip" >&2
    exit 0
fi
echo "setup: installing Debian packages: ${need[*]} (about a minute)"
if ! { "${sudo[@]}" apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}"; } >/tmp/eos-setup-apt.log 2>&1; then
    echo "setup: installing ${need[*]} failed (see /tmp/eos-setup-apt.log): those tests will skip" >&2
fi
exit 0
