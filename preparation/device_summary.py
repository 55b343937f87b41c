"""The figures that matter after `preparation/device_check.sh`, read back from its output folder.

    python -m benchmarks device summary OUT [FAILED_STEP ...]

Per bench run (`bench-*`): the report's physical-floor lines (AR TPOT against weight bytes / bandwidth), then
tau, TPOT and speedup per method. Per K-flat run (`kflat-*`): verify(K)/verify(0) at each context length and any
point below its floor. Exit 1 when a step failed (named on the command line) or a time fell below a floor.
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from benchmarks.analysis.report import floor_lines
from benchmarks.analysis.summary import summarize
from benchmarks.core.store import RunStore


def _num(value: object, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def bench_lines(run_dir: Path) -> tuple[list[str], bool]:
    """Floor lines and one line per cell of a bench run; True when an AR TPOT is below a binding floor."""
    store = RunStore(run_dir)
    manifest = store.manifest()
    rows = summarize(store.records(), manifest)
    floor = floor_lines(rows, manifest)
    lines = [f"{run_dir.name}:", *(f"  {line}" for line in floor)]
    for r in rows:
        lines.append(f"  {r['label']:<22} tau {_num(r['tau'], '.2f'):>5}  TPOT {_num(r['tpot_ms_mean'], '.3f'):>8} ms"
                     f"  speedup {_num(r['speedup'], '.2f'):>5}  identical {_num(r['identical_frac'], '.2f'):>4}"
                     + (f"  ERROR {r['error']}" if r.get("error") else ""))
    return lines, any("BELOW THE FLOOR" in line for line in floor)


def kflat_lines(out: Path) -> tuple[list[str], bool]:
    """verify(K)/verify(0) per context length; True when a point is below its floor."""
    with open(out / "kflat.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = [f"{out.name}: verify(K)/verify(0)"]
    for context in sorted({int(r["context_len"]) for r in rows}):
        points = sorted((r for r in rows if int(r["context_len"]) == context), key=lambda r: int(r["k"]))
        ratios = "  ".join(f"K={r['k']}: {_num(float(r['normalised_to_k0'] or 'nan'), '.2f')}" for r in points)
        k0 = next((r for r in points if r["k"] == "0"), None)
        base = f" (K=0 {float(k0['median_ms']):.3f} ms, floor {_num(float(k0['floor_ms'] or 'nan'), '.3f')} ms)" \
            if k0 else ""
        lines.append(f"  context {context}{base}: {ratios}")
    bad = [r for r in rows if r["verdict"] == "IMPOSSIBLE"]
    lines += [f"  IMPOSSIBLE: K={r['k']} context {r['context_len']} median {r['median_ms']} ms < floor "
              f"{r['floor_ms']} ms (a timing error)" for r in bad]
    return lines, bool(bad)


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", type=Path, help="the device check's output folder")
    ap.add_argument("failed", nargs="*", help="steps that failed, as the device check names them")


def main(args: argparse.Namespace) -> int:
    out, failed = args.out, args.failed
    lines, below = ["", "== device check summary =="], False
    for run_dir in sorted(out.glob("bench-*/")):
        if (run_dir / "manifest.json").exists():
            more, bad = bench_lines(run_dir)
            lines, below = lines + more, below or bad
    for kflat_dir in sorted(out.glob("kflat-*/")):
        if (kflat_dir / "kflat.csv").exists():
            more, bad = kflat_lines(kflat_dir)
            lines, below = lines + more, below or bad
    lines += [f"FAILED step: {step}" for step in failed]
    lines.append("verdict: " + ("FAIL" if failed or below else "ok")
                 + (" (a time below its physical floor)" if below else ""))
    print("\n".join(lines))
    return 1 if failed or below else 0
