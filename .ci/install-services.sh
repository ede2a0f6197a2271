#!/bin/sh
# Install the services the replica tests start on loopback: Debian's PostgreSQL and nginx.
# Idempotent: does nothing when both are there. The tests run their own instances from
# temporary directories (tests/services.py); none of the system's services is used.
set -eu

have_postgres() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
have_nginx() { command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; }

if have_postgres && have_nginx; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    postgresql nginx
