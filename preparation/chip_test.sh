#!/usr/bin/env bash
# `make test` on a machine that holds a chip for minutes at a time, in calls that go on where the last one stopped.
# The same tests as `make test` (pytest -m "not heavy", after `make lint`), in two parts run side by side:
#   - the tests that run JAX (marked jax, slow, vllm or llamacpp) in one process on the chip (one program at a time);
#   - the engine-free rest, which compiles no JAX program (the suite's marker guard fails one that does), in PARTS
#     processes on the CPU (JAX_PLATFORMS=cpu), split by files.
# Each finished test is appended to DIR/<part>.tsv with its seconds (tests/resume.py), and a rerun with the same DIR
# leaves those out; a failure's report goes to DIR/<part>.failures as it happens.
# Every part is stopped at SECONDS (SIGTERM: the test it was running is not recorded, and runs again next time).
# Exit 0 once every test has finished and none failed, 1 when one failed or lint did, 4 while some are left to run.
#
#   bash preparation/chip_test.sh DIR [SECONDS]     # PARTS (default 6), VENV (.venv), PYTEST_ARGS from the environment
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:?usage: chip_test.sh DIR [SECONDS]}"; SECONDS_LEFT="${2:-540}"; PARTS="${PARTS:-6}"; VENV="${VENV:-.venv}"
case "$SECONDS_LEFT" in ""|*[!0-9]*) echo "chip_test: SECONDS is a whole number of seconds" >&2; exit 2;; esac
(cd "$ROOT" && PARTS="$PARTS" python3 -E -m benchmarks.core.environment PARTS VENV PYTEST_ARGS) || exit 2
mkdir -p "$DIR" && DIR="$(cd "$DIR" && pwd)" || { echo "chip_test: cannot make the folder $1" >&2; exit 2; }
cd "$ROOT"
[ -x "$VENV/bin/python" ] || { echo "chip_test: no $VENV here: run bash preparation/bootstrap.sh first" >&2; exit 2; }
PY="$VENV/bin/python"
ENGINES="jax or slow or vllm or llamacpp"
STOP=$(( $(date +%s) + SECONDS_LEFT ))

part() {  # part NAME: pytest for the rest of SECONDS, resumable through DIR/NAME.tsv, its output in DIR/NAME.log
  local name="$1"; shift
  DFLASH_TEST_RESUME="$DIR/$name.tsv" timeout -s TERM -k 30 $(( STOP - $(date +%s) )) \
    "$PY" -m pytest -p tests.resume -p no:cacheprovider -q "$@" ${PYTEST_ARGS:-} >>"$DIR/$name.log" 2>&1
  echo "$name: pytest exit $?" >>"$DIR/$name.log"
}

# lint once it has passed; again while it has not
tail -n 1 "$DIR/lint.log" 2>/dev/null | grep -qx "make lint: exit 0" \
  || { make lint VENV="$VENV" >"$DIR/lint.log" 2>&1; echo "make lint: exit $?" >>"$DIR/lint.log"; }
for i in $(seq 0 $((PARTS - 1))); do
  JAX_PLATFORMS=cpu DFLASH_TEST_SHARD="$i/$PARTS" part "cpu-$i" -m "not heavy and not ($ENGINES)" &
done
part chip -m "not heavy and ($ENGINES)" &
wait

"$PY" - "$DIR" <<'EOF'
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, ".")
from tests.resume import finished

folder = Path(sys.argv[1])
outcomes = {}
for tsv in sorted(folder.glob("*.tsv")):
    outcomes |= finished(tsv)
count = Counter(outcomes.values())
exits = {log.stem: [line for line in log.read_text().splitlines() if ": pytest exit " in line][-1:]
         for log in sorted(folder.glob("*.log")) if log.stem != "lint"}
left = [name for name, last in exits.items() if not last or last[0].rsplit(" ", 1)[1] in ("124", "137")]
print(f"chip_test: {count['passed']} passed, {count['skipped']} skipped, {count['failed']} failed"
      + (f"; not finished: {', '.join(left)} (run again with the same folder)" if left else "; every part finished"))
for node, outcome in sorted(outcomes.items()):
    if outcome == "failed":
        print(f"FAILED {node}")
if count["failed"]:
    print(f"their reports: {' '.join(str(p) for p in sorted(folder.glob('*.failures')))}")
lint = (folder / "lint.log").read_text().strip().splitlines()
print(lint[-1] if lint else "make lint: no output")
sys.exit(1 if count["failed"] or not lint or not lint[-1].endswith("exit 0") else 4 if left else 0)
EOF
