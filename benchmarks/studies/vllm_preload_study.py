"""`study vllm-preload`: vLLM on CPU with and without the libraries its CPU docs preload (tcmalloc, Intel OpenMP;
benchmarks/engines/vllm/vllm_preload.py), side by side in one run.

The preset's AR and DFlash cells run twice, as set up and with `preload: false`; the four engines load side by side,
each in an engine worker that is stopped between its calls (as an interleaved matrix runs vLLM on CPU), and every
prompt goes to the four in turn, the order rotating from prompt to prompt, after one untimed warm-up prompt each.
Per method it prints the mean TPOT with and without, τ, and the per-prompt ratio TPOT without / with (the preload's
speedup; `metrics.paired_ratio`: geometric mean, 95 % Student-t interval over the prompts), and DFlash's speedup over
AR within each arm. Exit 3 (VIOLATION) when an arm's greedy tokens differ from the other's. Timings depend on what
else the host runs: say so when quoting them.

    python -m benchmarks study vllm-preload [--preset tiny] [--dataset humaneval] [--prompts 8] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.config.matrix_expand import expand
from benchmarks.core import metrics
from benchmarks.core.atomic import atomic_write_text
from benchmarks.core.cells import Cell, int_option
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters
from benchmarks.core.exit_codes import Exit
from benchmarks.core.numbers import Bounded
from benchmarks.data.datasets import load_prompts
from benchmarks.engines import implementation
from benchmarks.engines.vllm.vllm_options import PRELOAD_OPTION
from benchmarks.engines.worker import WorkerEngine

ARMS = (True, False)  # preloaded, not
LOAD_TIMEOUT_S = 1800.0
REQUEST_TIMEOUT_S = 600.0


@dataclass
class Arm:
    """One cell's requests, in prompt order, and what its engine described (the preload included)."""

    cell: Cell
    records: list[RequestRecord] = field(default_factory=list)
    describe: Mapping[str, object] = field(default_factory=dict)

    @property
    def tpot_ms(self) -> list[float]:
        return [metrics.tpot_ms(r.ttft_s, r.last_token_s, len(r.output_ids)) for r in self.records]

    @property
    def tau(self) -> float | None:
        lengths = [r.accept_lengths for r in self.records if r.accept_lengths]
        if not lengths:
            return None
        counters = sum((SpecCounters.from_accept_lengths(a, self.cell.k) for a in lengths), SpecCounters())
        return metrics.acceptance(counters).tau


def arm_cells(preset: str, dataset: str, prompts: int) -> list[Cell]:
    """The preset's vLLM AR and DFlash cells, as set up and with the preloads off (in that order)."""
    from benchmarks.config.matrix_parse import parse_matrix  # lazy: imports yaml

    matrix = parse_matrix({"name": "vllm-preload", "preset": preset, "engine": "vllm", "interleave": True,
                           "methods": ["baseline", "dflash"], "datasets": [dataset], "num_prompts": prompts},
                          source="study vllm-preload")
    return [dataclasses.replace(c, engine_options={**c.engine_options, PRELOAD_OPTION: on})
            for on in ARMS for c in expand(matrix)]


def run(cells: list[Cell], prompts: list[list[int]], warmup: list[int]) -> list[Arm]:
    """Load the cells' engines side by side (worker processes, paused between calls), send the warm-up prompt to
    each, then each prompt to all of them, rotating the order; close them."""

    def load(cell: Cell) -> WorkerEngine:
        engine = WorkerEngine(implementation(cell.engine), request_timeout_s=REQUEST_TIMEOUT_S,
                              load_timeout_s=LOAD_TIMEOUT_S, pause_idle=True)
        engine.load(cell)
        return engine

    with ThreadPoolExecutor(len(cells)) as pool:
        engines = list(pool.map(load, cells))
    arms = [Arm(c) for c in cells]
    try:
        params = [SamplingParams(0.0, c.max_new_tokens) for c in cells]
        for engine, p in zip(engines, params):
            engine.generate(warmup, p)
        for i, ids in enumerate(prompts):
            for j in (i + n for n in range(len(cells))):
                arms[j % len(cells)].records.append(engines[j % len(cells)].generate(ids, params[j % len(cells)]))
        for arm, engine in zip(arms, engines):
            arm.describe = engine.describe()
    finally:
        for engine in engines:
            engine.close()
    return arms


def summary(arms: list[Arm]) -> dict[str, Any]:
    """Per method: TPOT with and without, τ, the ratio without / with and its interval, identical tokens; per arm
    DFlash's speedup over AR."""
    by = {(a.cell.method, bool(a.cell.engine_options[PRELOAD_OPTION])): a for a in arms}
    methods = sorted({a.cell.method for a in arms}, key=lambda m: m != "baseline")
    rows = []
    for m in methods:
        on, off = by[(m, True)], by[(m, False)]
        ratio = metrics.paired_ratio(off.tpot_ms, on.tpot_ms)
        rows.append({"method": m, "tpot_ms_with": metrics.mean(on.tpot_ms),
                     "tpot_ms_without": metrics.mean(off.tpot_ms), "tau_with": on.tau, "tau_without": off.tau,
                     "ratio_without_over_with": ratio.geomean, "ci_low": ratio.ci_low, "ci_high": ratio.ci_high,
                     "prompts": ratio.n,
                     "identical": sum(a.output_ids == b.output_ids for a, b in zip(on.records, off.records))})
    speedups = {}
    for arm in ARMS:
        base, spec = by.get(("baseline", arm)), by.get(("dflash", arm))
        if base and spec:
            s = metrics.paired_speedup(base.tpot_ms, spec.tpot_ms)
            speedups["with" if arm else "without"] = {"geomean": s.geomean, "ci_low": s.ci_low, "ci_high": s.ci_high}
    return {"rows": rows, "dflash_speedup": speedups,
            "preload": {"with": by[(methods[0], True)].describe.get("preload"),
                        "without": by[(methods[0], False)].describe.get("preload")}}


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def table(result: dict[str, Any]) -> str:
    out = ["| method | TPOT ms with | TPOT ms without | τ with | τ without | without / with (95 % CI) | "
           "identical tokens |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        out.append(f"| {r['method']} | {_f(r['tpot_ms_with'])} | {_f(r['tpot_ms_without'])} | {_f(r['tau_with'])} | "
                   f"{_f(r['tau_without'])} | {_f(r['ratio_without_over_with'], '.3f')} "
                   f"({_f(r['ci_low'], '.3f')}–{_f(r['ci_high'], '.3f')}) | {r['identical']}/{r['prompts']} |")
    for arm, s in result["dflash_speedup"].items():
        out.append(f"\nDFlash over AR {arm} the preloads: {_f(s['geomean'], '.3f')} "
                   f"({_f(s['ci_low'], '.3f')}–{_f(s['ci_high'], '.3f')})")
    with_ = result["preload"]["with"] or {}
    out.append(f"\nLD_PRELOAD with: {with_.get('ld_preload')}; missing: {with_.get('missing') or 'none'}")
    return "\n".join(out)


OUTPUT_ARGS: tuple[str, ...] = ()  # --out is a file: checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS = ("out",)
OUTPUTS: tuple[str, ...] = ()  # no output folder


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--preset", default="tiny", help="configs/presets/<name>.yaml (default tiny)")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--prompts", type=Bounded(int, 2, 10_000), default=8,
                    help="timed prompts (one more is the warm-up)")
    ap.add_argument("--out", type=Path, help="write the result as JSON here too")


def main(args: argparse.Namespace) -> int:
    from benchmarks.config.model_refs import load_tokenizer  # lazy: imports yaml

    if args.out is not None and not args.out.parent.is_dir():
        print(f"study vllm-preload: error: --out {args.out}: its folder does not exist")
        return Exit.BAD_INPUT
    cells = arm_cells(args.preset, args.dataset, args.prompts)
    limit = int_option(cells[0].engine_options, "max_model_len", 2048) - cells[0].max_new_tokens
    tokenizer = load_tokenizer(cells[0].target)
    prompts = [p.ids for p in load_prompts(args.dataset, args.prompts + 1, cells[0].seed, tokenizer,
                                           max_prompt_tokens=limit)]
    result = summary(run(cells, prompts[1:], prompts[0]))
    print(table(result))
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=2, default=str))
    same = all(r["identical"] == r["prompts"] for r in result["rows"])
    return Exit.OK if same else Exit.VIOLATION
