"""`study engine-ties`: the greedy AR tokens of a run's engines against each other on the same prompt ids, each
prompt's first divergence classified with the lossless check's tie rule (verification/ties.py) from one scorer
engine's view of the target there: by default llama.cpp's log-probabilities (`n_probs`; differences between them
are the logits' own). Untimed; it reads a finished run and loads only the scorer's baseline, and only when some
outputs differ. Exit 3 when a divergence is no tie.
"""
from __future__ import annotations

import argparse
from itertools import combinations
from pathlib import Path
from typing import Any, cast

from benchmarks.core import metrics
from benchmarks.core.cells import Cell
from benchmarks.core.engine_io import TokenScores
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.engines import ScoreTokens, catalog, create_engine, offers
from benchmarks.records.records import RequestLine
from benchmarks.records.store import RunStore
from verification import ties

TOP_N = 8


def ar_outputs(store: RunStore, cell: Cell, dataset: str) -> dict[str, list[int]]:
    return {r.prompt_sha256: r.output_ids for r in store.unit(cell.cell_id, dataset) if type(r) is RequestLine}


def divergences(outputs: dict[str, dict[str, list[int]]]) -> list[dict[str, Any]]:
    """Each pair of engines' first divergence on each shared prompt: {engines, prompt, index, tokens, prefix}."""
    found = []
    for a, b in combinations(sorted(outputs), 2):
        for sha in sorted(set(outputs[a]) & set(outputs[b])):
            out_a, out_b = outputs[a][sha], outputs[b][sha]
            d = metrics.first_divergence(out_a, out_b)
            if d is not None:
                found.append({"engines": (a, b), "prompt": sha, "index": d, "prefix": out_a[:d],
                              "tokens": (out_a[d] if d < len(out_a) else None, out_b[d] if d < len(out_b) else None)})
    return found


def verdict(scores: TokenScores | None, tokens: tuple[int | None, int | None]) -> ties.Verdict:
    """The tie rule at one divergence from the scorer's `token_scores` there (None: an output ended earlier)."""
    if scores is None:
        return ties.judge_tie(tokens, "", [None, None], [])
    return ties.judge_tie(tokens, scores.dtype, scores.token_logits, scores.top_logits)


def table(rows: list[tuple[str, dict[str, Any], ties.Verdict]]) -> str:
    out = ["| dataset | engines | prompt | index | tokens | margin | tolerance | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    for dataset, d, v in rows:
        margin = "–" if v.margin is None else f"{v.margin:.4g}"
        tol = "–" if v.tolerance is None else f"{v.tolerance:.4g}"
        out.append(f"| {dataset} | {' vs '.join(d['engines'])} | {d['prompt'][:12]} | {d['index']} | "
                   f"{d['tokens'][0]} vs {d['tokens'][1]} | {margin} | {tol} | {'tie' if v.tie else v.reason} |")
    return "\n".join(out)


INPUT_ARGS = ("config", "run_dir")  # checked to exist before anything loads (benchmarks/cli/__init__.py)


# It prints and writes no file: --run-dir is the run it reads (benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("config", type=Path, help="the matrix the run measured")
    ap.add_argument("--run-dir", type=Path, required=True, help="the finished run folder")
    ap.add_argument("--scorer", default="llama.cpp", help="the engine whose logits classify (default llama.cpp)")


def main(args: argparse.Namespace) -> int:
    from benchmarks.config.matrix_parse import load_matrix  # lazy: imports yaml
    from benchmarks.run.cell_files import with_model_files  # lazy: imports yaml
    from benchmarks.run.plan import build_plan  # lazy: imports tqdm, yaml

    plan = build_plan(load_matrix(args.config), args.run_dir, reuse=True, progress=False)
    store = RunStore(args.run_dir)
    bases = {c.engine: c for c in plan.cells if c.method == "baseline" and c.temperature == 0
             and not catalog.engine(c.engine).serves}
    if args.scorer not in bases:
        raise BadInput(f"the run has no greedy {args.scorer} baseline to score with; engines: {', '.join(bases)}")
    found = [(w.key, d) for w in plan.workloads
             for d in divergences({e: ar_outputs(store, c, w.key) for e, c in bases.items()})]
    compared = ", ".join(bases)
    if not found:
        print(f"greedy AR tokens of {compared}: no divergence on any shared prompt; nothing to classify")
        return Exit.OK
    engine = create_engine(args.scorer)
    engine.load(with_model_files(bases[args.scorer], plan.target))
    try:
        if not offers(engine, args.scorer, "token_scores"):
            raise BadInput(f"engine {args.scorer} offers no token_scores to classify with")
        scorer = cast(ScoreTokens, engine)
        prompts = {p.sha256: p for name, (measured, _) in plan.prompts.items() for p in measured}
        rows = [(name, d, verdict(None if None in d["tokens"] else scorer.token_scores(
            prompts[d["prompt"]].ids, d["prefix"], list(d["tokens"]), TOP_N), d["tokens"])) for name, d in found]
    finally:
        engine.close()
    print(f"greedy AR tokens of {compared}, first divergences scored by {args.scorer}:\n\n{table(rows)}")
    return Exit.OK if all(v.tie for _, _, v in rows) else Exit.VIOLATION
