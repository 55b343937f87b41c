"""The K schedule's tables (`cost-model --schedule`, `--calibrate-from`): the best K per B with its margin, the
prediction beside a measured K × B grid, the calibration beside the measured steps, and each engine's config. Rendering
only: the derivation is analysis/k_schedule_compute.py."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import yaml

from benchmarks.analysis.k_schedule_compute import Calibration, Choice, GridCell, StepCost
from benchmarks.core.metrics import Interval
from benchmarks.decide import k_schedules

CLOSE = 0.05  # a predicted best K whose measured throughput is within 5 % of the measured best's counts as found


def _iv(x: Interval, digits: int = 0) -> str:
    if math.isnan(x.value):
        return "–"
    if not x.has_interval or (x.low == x.value == x.high and not x.units):
        return f"{x.value:.{digits}f}"
    return f"{x.value:.{digits}f} [{x.low:.{digits}f}, {x.high:.{digits}f}]"


def _pct(x: Interval) -> str:
    if math.isnan(x.value):
        return "–"
    if not x.has_interval:
        return f"{100 * x.value:+.1f} %"
    return f"{100 * x.value:+.1f} % [{100 * x.low:+.1f}, {100 * x.high:+.1f}]"


def choices_markdown(choices: Sequence[Choice], about: str, axis: str = "K") -> str:
    """Per B the best K, its throughput, the next best and the margin between them, whether the margin is decided;
    then every K's predicted throughput per B. `axis` names what the choices range over (a tree's "budget")."""
    ks = sorted({p.k for c in choices for p in c.points})
    lines = [about, "", f"| B | best {axis} | tok/s | τ | step ms | next best {axis} | margin | decided |",
             "|" + "---|" * 8]
    for c in choices:
        nxt = "–" if c.runner_up is None else str(c.runner_up.k)
        lines.append(f"| {c.batch} | **{c.best.k}** | {_iv(c.best.tok_per_s)} | {_iv(c.best.tau, 2)} | "
                     f"{_iv(c.best.step_ms, 3)} | {nxt} | {_pct(c.margin)} | {'yes' if c.decided else 'no'} |")
    lines += ["", f"Predicted tok/s of the batch per {axis} (columns) and B (rows):", "",
              "| B | " + " | ".join(f"{axis} = {k}" for k in ks) + " |", "|" + "---|" * (len(ks) + 1)]
    for c in choices:
        by_k = {p.k: p.tok_per_s.value for p in c.points}
        lines.append(f"| {c.batch} | " + " | ".join(f"{by_k[k]:.0f}" if k in by_k else "–" for k in ks) + " |")
    return "\n".join(lines)


def found(predicted_k: int, cells: Mapping[int, GridCell]) -> tuple[int, bool, float]:
    """The measured best K among `cells` (K -> cell at one B), whether the predicted best K's measured throughput lies
    within the interval of the measured best's or within 5 % of it, and its shortfall (1 − its / the best's)."""
    best = max(cells.values(), key=lambda c: c.tok_per_s.value)
    mine = cells[predicted_k].tok_per_s.value
    short = 1 - mine / best.tok_per_s.value
    inside = best.tok_per_s.has_interval and mine >= best.tok_per_s.low
    return best.k, inside or short <= CLOSE, short


def grid_markdown(choices: Sequence[Choice], grid: Mapping[tuple[int, int], GridCell], axis: str = "K") -> str:
    """The measured K × B grid (tok/s with its interval over the batches) beside the predicted best K among the Ks
    measured at each B, whether the prediction holds, and the predicted tok/s at the measured best K with its error
    (`axis`: what the grid ranges over, K or a tree's budget)."""
    ks = sorted({k for _, k in grid})
    lines = ["| B | " + " | ".join(f"{axis} = {k} tok/s" for k in ks) + f" | measured best {axis} | predicted best "
             f"{axis} | its shortfall | holds | predicted tok/s at the measured best {axis} |",
             "|" + "---|" * (len(ks) + 6)]
    for c in choices:
        at = {k: cell for (b, k), cell in grid.items() if b == c.batch}
        if c.best.k not in at:
            continue
        best_k, holds, short = found(c.best.k, at)
        row = " | ".join(_iv(at[k].tok_per_s) if k in at else "–" for k in ks)
        level = next((p.tok_per_s.value for p in c.points if p.k == best_k), math.nan)
        lines.append(f"| {c.batch} | {row} | {best_k} | {c.best.k} | {100 * short:.1f} % | "
                     f"{'yes' if holds else '**no**'} | {level:.0f} "
                     f"({100 * (level / at[best_k].tok_per_s.value - 1):+.1f} %) |")
    return "\n".join(lines)


def calibration_markdown(cal: Calibration, cost: StepCost, grid: Mapping[tuple[int, int], GridCell]) -> str:
    """The fit on the plain-decoding curve, then each measured speculative step beside the step the calibrated model
    predicts, per (B, K), with the error."""
    lines = [f"Fitted on the plain-decoding curve: {cal.overhead_ms:.3f} ms of overhead per forward pass, "
             f"{100 * cal.flops_fraction:.3g} % of the peak FLOP/s; worst error on that curve "
             f"{100 * cal.worst_error:.1f} %.", "", "| B | AR step ms measured | AR step ms fitted | error |",
             "|---|---|---|---|"]
    for b, (m, f) in sorted(cal.points.items()):
        lines.append(f"| {b} | {m:.3f} | {f:.3f} | {100 * (f / m - 1):+.1f} % |")
    spec = sorted((b, k) for b, k in grid if k > 0)
    if spec:
        lines += ["", "| B | K | step ms measured | step ms predicted from the AR curve | error |",
                  "|---|---|---|---|---|"]
        for b, k in spec:
            pred, measured = cost(b, k), grid[(b, k)].step_ms
            err = f"{100 * (pred.value / measured.value - 1):+.1f} %" if pred is not None else "–"
            shown = "–" if pred is None else f"{pred.value:.3f}"
            lines.append(f"| {b} | {k} | {_iv(measured, 3)} | {shown} | {err} |")
    return "\n".join(lines)


def config_files(schedule: k_schedules.Schedule, matrix_base: Mapping[str, object], max_batch: int
                 ) -> dict[str, str]:
    """Each engine's config of the schedule, by file name: vLLM's speculative_config entries, TensorRT-LLM's,
    SGLang's per-range settings, and the harness's matrix."""
    sglang = ",\n ".join(json.dumps(r) for r in k_schedules.sglang_config(schedule))
    return {"vllm.json": json.dumps(k_schedules.vllm_config(schedule, max_batch)),
            "trtllm.json": json.dumps(k_schedules.trtllm_config(schedule, max_batch)),
            "sglang.json": f"[{sglang}]",
            "matrix.yaml": yaml.safe_dump(k_schedules.matrix_config(schedule, matrix_base), sort_keys=False)}


def configs_markdown(files: Mapping[str, str]) -> str:
    lang = {"json": "json", "yaml": "yaml"}
    out = []
    for name, text in files.items():
        out += [f"`{name}`:", "", f"```{lang[name.rsplit('.', 1)[1]]}", text.rstrip(), "```", ""]
    return "\n".join(out)
