#!/bin/sh
# Install what tests/engine/test_cpu_kernels_neon.py needs to check the aarch64 (NEON)
# kernels on an x86 machine: Debian's aarch64 cross compiler (static libc and libstdc++
# included) and qemu-user to run its programs. Idempotent: does nothing when both are
# there.
set -eu

have_cxx() { command -v aarch64-linux-gnu-g++ >/dev/null 2>&1; }
have_qemu() { command -v qemu-aarch64 >/dev/null 2>&1 || command -v qemu-aarch64-static >/dev/null 2>&1; }

if have_cxx && have_qemu; then
    exit 0
fi
case "$(uname -m)" in
    aarch64 | arm64) exit 0 ;;  # the native compiler builds the check, which runs as it is
esac

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    g++-aarch64-linux-gnu qemu-user
