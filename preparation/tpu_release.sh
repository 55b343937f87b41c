#!/usr/bin/env bash
# Which tpu-inference runs on TPU, checked against requirements-tpu.txt. Prints one line:
#   "<version> <submodule commit>"  when tpu-inference/ is populated: its source runs, built as <version>, next to
#                                   vllm-tpu==<version> (the release that matches its commit);
#   "<version> wheels"              when it is not: the pinned vllm-tpu and tpu-inference wheels run.
# Exits 1 with one message when the submodule's commit has no known release, or when its release and the pins
# in requirements-tpu.txt disagree.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUB="$ROOT/tpu-inference"
TABLE="$ROOT/preparation/tpu_inference_releases.tsv"
REQ="$ROOT/requirements-tpu.txt"

die() { echo "bootstrap: error: $*" >&2; exit 1; }
pin() { sed -n "s/^$1==\([^ #]*\).*/\1/p" "$REQ" | head -n1; }

VLLM_PIN="$(pin vllm-tpu)"
TPU_PIN="$(pin tpu-inference)"
[ -n "$VLLM_PIN" ] && [ "$VLLM_PIN" = "$TPU_PIN" ] \
  || die "requirements-tpu.txt pins vllm-tpu==${VLLM_PIN:-?} and tpu-inference==${TPU_PIN:-?}; vllm-tpu X requires tpu-inference==X: pin both to the same release."

if [ ! -f "$SUB/setup.py" ]; then
  echo "$VLLM_PIN wheels"
  exit 0
fi

COMMIT="$(git -C "$SUB" rev-parse HEAD 2>/dev/null)" \
  || die "tpu-inference/ has files but is not a git checkout; run 'git submodule update --init tpu-inference'."
RELEASE="$(awk -F'\t' -v c="$COMMIT" '$2 == c {print $3}' "$TABLE")"
if [ -z "$RELEASE" ]; then
  TAG="$(git -C "$SUB" describe --tags --exact-match HEAD 2>/dev/null || true)"
  [[ "$TAG" =~ ^v([0-9]+\.[0-9]+\.[0-9]+)$ ]] && RELEASE="${BASH_REMATCH[1]}"
fi
[ -n "$RELEASE" ] \
  || die "the tpu-inference submodule is at commit $COMMIT, which is no release (not in preparation/tpu_inference_releases.tsv, no vX.Y.Z tag), so no vllm-tpu matches it; check out a release (git -C tpu-inference checkout v$VLLM_PIN) or add its row to the table."
[ "$RELEASE" = "$VLLM_PIN" ] \
  || die "the tpu-inference submodule is release $RELEASE (commit $COMMIT) but requirements-tpu.txt pins vllm-tpu==$VLLM_PIN and tpu-inference==$TPU_PIN; pin both to $RELEASE, or move the submodule back (git -C tpu-inference checkout v$VLLM_PIN)."
echo "$RELEASE $COMMIT"
