"""The figures that matter after `preparation/device_check.sh`, read back from its output folder.

    python -m benchmarks device summary OUT [--failed STEP] [--dropped STEP] [--skipped STEP] [--note TEXT]

The interpreter and versions the check ran with (`env.json`); per JAX study (`device-*`, benchmarks/studies/
device.py): AR and DFlash step times beside the roofline's prediction and their floor, what the host adds per step,
the seconds of each compiled graph, the DFlash oracle step's cost in AR steps and the speedup it implies at the
published tau, verify(K)/verify(0) measured and predicted; per bench run (`bench-*`): the report's physical-floor
lines, then tau, TPOT and speedup per method; per K-flat run (`kflat-*`): verify(K)/verify(0) at each context.
Then the steps named as failed, dropped (for time) and skipped, and a verdict. Exit (the
worst wins): 1 a step failed, 3 a time below its floor or a study's violation, 4 a step dropped, else 0.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from benchmarks.analysis.summary import summarize_run
from benchmarks.core.exit_codes import BadInput, Exit, worst
from benchmarks.core.numbers import MISSING, is_number
from benchmarks.records.store import RunStore
from benchmarks.report.floors_report import floor_lines
from benchmarks.studies.device import compile_line, predicted_floor, split_line
from benchmarks.studies.device_grid import matmul_lines, point_line


def _num(value: object, fmt: str) -> str:
    return format(value, fmt) if is_number(value) else MISSING


def bench_lines(run_dir: Path) -> tuple[list[str], bool]:
    """Floor lines and one line per cell of a bench run; True when an AR TPOT is below a binding floor."""
    store = RunStore(run_dir)
    summary = summarize_run(store)
    rows = summary.rows
    floor = floor_lines(rows, summary.manifest)
    lines = [f"{run_dir.name}:", *(f"  {line}" for line in floor)]
    warmups = [(p.get("describe") or {}).get("warmup_s") for p in store.provenances().values()]
    warmup = sum(w for w in warmups if isinstance(w, (int, float)))
    during = sum((r.extra or {}).get("compile_s") or 0.0 for r in summary.records.requests)
    lines.append(f"  compiled: {warmup:.1f} s in the engines' warm-ups (smallest bucket and step), {during:.1f} s "
                 f"before requests that needed another shape")
    for r in rows:
        lines.append(f"  {r.label:<22} tau {_num(r.tau, '.2f'):>5}  TPOT {_num(r.tpot_ms_mean, '.3f'):>8} ms"
                     f"  speedup {_num(r.speedup, '.2f'):>5}  identical {_num(r.identical_frac, '.2f'):>4}"
                     + (f"  same/tie/viol. {r.n_identical:.0f}/{r.n_ties:.0f}/{r.n_violations:.0f}"
                        if is_number(r.n_ties) else "")
                     + (f"  ERROR {r.error}" if r.error else ""))
    return lines, any("BELOW THE FLOOR" in line for line in floor)


def kflat_lines(out: Path) -> tuple[list[str], bool]:
    """verify(K)/verify(0) per context length, measured (predicted); True when a point is below its floor."""
    with open(out / "kflat.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = [f"{out.name}: verify(K)/verify(0), measured (predicted)"]
    for context in sorted({int(r["context_len"]) for r in rows}):
        points = sorted((r for r in rows if int(r["context_len"]) == context), key=lambda r: int(r["k"]))
        ratios = "  ".join(f"K={r['k']}: {_num(_float(r['normalised_to_k0']), '.2f')} "
                           f"({_num(_float(r['predicted_normalised']), '.2f')})" for r in points)
        k0 = next((r for r in points if r["k"] == "0"), None)
        base = (f" (K=0 {float(k0['median_ms']):.3f} ms, predicted {_num(_float(k0['predicted_ms']), '.3f')} ms, "
                f"floor {_num(_float(k0['floor_ms']), '.3f')} ms)") if k0 else ""
        lines.append(f"  context {context}{base}: {ratios}")
    bad = [r for r in rows if r["verdict"] == "IMPOSSIBLE"]
    lines += [f"  IMPOSSIBLE: K={r['k']} context {r['context_len']} median {r['median_ms']} ms < floor "
              f"{r['floor_ms']} ms (a timing error)" for r in bad]
    return lines, bool(bad)


def _float(text: str) -> float:
    return float(text or "nan")


def device_lines(out: Path) -> tuple[list[str], bool]:
    """The JAX study at one shape (device.json, and its kflat.csv); True on a violation (a time below its floor,
    an oracle that did not accept every draft)."""
    d = json.loads((out / "device.json").read_text())
    if "skipped" in d:
        return [f"{out.name}: {d['shape']} skipped, {d['skipped']}"], False
    bw = d["bandwidth_bytes_per_s"]
    lines = [f"{out.name}: {d['shape']} ({d['dtype']}, random weights) on {d['device']}, "
             f"{d['weight_bytes'] / 1e9:.2f} GB read per forward, {_num(bw and bw / 1e9, '.0f')} GB/s "
             f"({d['bandwidth_source']}); predicted for {d.get('predicted_for') or 'nothing (not in the chip table)'}"]
    if "ar" in d:
        ar = d["ar"]
        lines += [f"  AR TPOT {ar['tpot_ms']:.3f} ms, step {ar['step_ms']:.3f} ms ({predicted_floor(ar)}); "
                  f"{ar['requests']} requests, host round trips per request {ar['round_trips']}",
                  f"    {split_line(ar['split'])}", f"    {compile_line(ar)}"]
    if "dflash" in d:
        df = d["dflash"]
        lines.append(f"  DFlash K={df['k']} oracle: tau {df['tau']:.2f}, step {df['step_ms']:.3f} ms "
                     f"({predicted_floor(df)})")
        if "cost_ar_steps" in df:
            implied = ", ".join(f"{v['speedup']:.2f}x at tau {v['tau']:.2f} ({name})"
                                for name, v in sorted(df["implied_speedup"].items(), key=lambda kv: kv[1]["tau"]))
            lines.append(f"    = {df['cost_ar_steps']:.2f} AR steps (predicted "
                         f"{_num(df.get('predicted_cost_ar_steps'), '.2f')}): implied speedup {implied}; "
                         f"{df['speedup_at_oracle_tau']:.2f}x measured at tau {df['tau']:.2f}")
        lines += [f"    {split_line(df['split'])}", f"    {compile_line(df)}"]
    if (out / "kflat.csv").exists():
        more, _ = kflat_lines(out)
        lines += [f"  {line.strip()}" for line in more[1:]]
        if "verify" in d:
            lines.append(f"    verify forwards compiled in {d['verify']['compile_s']:.1f} s")
    lines += [f"  dropped: {line}" for line in d["dropped"]]
    lines += [f"  VIOLATION: {line}" for line in d["violations"]]
    return lines, bool(d["violations"])


def grid_lines(out: Path) -> tuple[list[str], bool]:
    """The engine's step at each point of `study device-grid` (grid.json) and what it skipped or dropped; True on a
    violation (a time below its floor, an oracle loop that rejected a draft)."""
    g = json.loads((out / "grid.json").read_text())
    lines = [f"{out.name}: the engine's own step, {g['shape']} ({g['dtype']}) on {g['device']}, jax {g['jax']}"
             + (f", libtpu {g['libtpu']}" if g.get("libtpu") else "")]
    lines += ["  " + matmul_lines(g["matmul"])] if g.get("matmul") else []
    lines += [f"  matmul {g['matmul_note']}"] if g.get("matmul_note") else []
    lines += [f"  {line}" for r in g["points"] for line in point_line(r).splitlines()]
    lines += [f"  B={r['batch']} context={r['context']} K={r['k']}: {r['status']}, {r['note']}" for r in g["skipped"]]
    lines += [f"  dropped: {line}" for line in g["dropped"]]
    lines += [f"  VIOLATION: {line}" for line in g["violations"]]
    return lines, bool(g["violations"])


def env_line(out: Path) -> list[str]:
    """The interpreter and the versions of what the JAX engine imports, from `study device env --json`."""
    if not (out / "env.json").exists():
        return []
    env = json.loads((out / "env.json").read_text())
    return [env["lines"][0], "  " + ", ".join(line.strip() for line in env["lines"][1:])]


# It prints and writes no file: OUT is the device check's folder it reads, never checked as an output
# (benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", type=Path, help="the device check's output folder")
    for name, what in (("failed", "a step that failed"), ("dropped", "a step dropped for time"),
                       ("skipped", "a step skipped, with the reason"), ("note", "a line to print first")):
        ap.add_argument(f"--{name}", action="append", default=[], help=f"{what}, as the device check names it")


def main(args: argparse.Namespace) -> int:
    out = args.out
    studies = [d / "device.json" for d in out.glob("device-*/") if (d / "device.json").exists()]
    found = studies or [p for pattern in ("bench-*/manifest.json", "kflat-*/kflat.csv", "grid-*/grid.json", "env.json")
                        for p in out.glob(pattern)]
    if not (found or args.failed or args.dropped or args.skipped):
        raise BadInput(f"{out}: no device-check results here (no device-*/device.json, bench-*/manifest.json, "
                       f"kflat-*/kflat.csv or env.json); give the output folder of preparation/device_check.sh")
    lines, below = ["", "== device check summary ==", *args.note, *env_line(out)], False
    for study in sorted(studies, key=lambda f: f.stat().st_mtime):  # in the order they ran
        more, bad = device_lines(study.parent)
        lines, below = lines + more, below or bad
    for run_dir in sorted(out.glob("bench-*/")):
        if (run_dir / "manifest.json").exists():
            more, bad = bench_lines(run_dir)
            lines, below = lines + more, below or bad
    for grid_dir in sorted(out.glob("grid-*/")):
        if (grid_dir / "grid.json").exists():
            more, bad = grid_lines(grid_dir)
            lines, below = lines + more, below or bad
    for kflat_dir in sorted(out.glob("kflat-*/")):
        if (kflat_dir / "kflat.csv").exists():
            more, bad = kflat_lines(kflat_dir)
            lines, below = lines + more, below or bad
    lines += [f"FAILED step: {step}" for step in args.failed]
    lines += [f"DROPPED step: {step}" for step in args.dropped]
    lines += [f"skipped: {step}" for step in args.skipped]
    code = worst(Exit.FAILED if args.failed else Exit.OK, Exit.VIOLATION if below else Exit.OK,
                 Exit.NOT_CHECKED if args.dropped else Exit.OK)
    why = [w for w, on in (("a step failed", args.failed), ("a time below its floor or a violation", below),
                           ("a step dropped for time", args.dropped)) if on]
    lines.append("verdict: " + ("ok" if code == Exit.OK else "FAIL" if code != Exit.NOT_CHECKED else "INCOMPLETE")
                 + (f" ({'; '.join(why)})" if why else ""))
    print("\n".join(lines))
    return code
