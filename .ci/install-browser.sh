#!/bin/sh
# Install the headless browser the playground test drives (Debian's chromium).
# Idempotent: does nothing when /usr/bin/chromium is already there.
set -eu

if [ -x /usr/bin/chromium ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core
