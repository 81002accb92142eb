#!/usr/bin/env bash
# Installs the Debian packages tpipe's build, tests and demo need, only those that are missing.
# Usage: tools/setup.sh [extra-package ...]
#   e.g. tools/setup.sh libopenmpi-dev openmpi-bin   (Open MPI, for -DTPIPE_ENABLE_MPI=ON)
set -euo pipefail
packages=(cmake g++ make catch2 libbenchmark-dev libtbb-dev ccache "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tpipe setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
