"""The Batch section and figures of a hand-made run at B = 1, 2, 4: batches pair on their prompts, the throughput
speedup and tokens/s come from each batch's span, the crossover is the first B whose interval lies below 1, and the
figures render with every text inside the canvas."""
from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from benchmarks.analysis.columns import NAMES as COLUMNS
from benchmarks.figures.batch_figures import batch_figures, pareto_front
from benchmarks.figures.figure_style import save_figure
from benchmarks.report.batch_report import batch_markdown
from tests.typed_runs import summary_json

CELL = {"engine": "jax", "target": "t", "temperature": 0.0, "max_new_tokens": 8, "seed": 0, "engine_options": {}}
N = 8  # prompts 0..7; at B the batches are [0..B-1], [B..2B-1], ...
# tokens/s of a batch, baseline and DFlash, per B: DFlash's lead shrinks with B and reverses at 4
RATE = {1: (100.0, 250.0), 2: (180.0, 300.0), 4: (300.0, 240.0)}


def cells() -> dict[str, dict]:
    out = {}
    for b in RATE:
        out[f"ar{b}"] = {**CELL, "method": "baseline", "draft": None, "k": 0, "batch_size": b}
        out[f"df{b}"] = {**CELL, "method": "dflash", "draft": "d", "k": 3, "batch_size": b}
    return out


def records() -> list[dict]:
    out = []
    for b, (ar, df) in RATE.items():
        for cid, rate in ((f"ar{b}", ar), (f"df{b}", df)):
            for j in range(N // b):
                wobble = 1 + 0.01 * (j % 2) * cid.startswith("df")  # DFlash's batches differ: the CI has a width
                tokens = 8 * b
                span = (tokens - b) / (rate * wobble)  # the tokens after each request's first, over the span
                for i in range(j * b, (j + 1) * b):
                    r = {"kind": "request", "cell_id": cid, "label": "baseline" if cid.startswith("ar") else
                         "dflash-k3", "engine": "jax", "method": cells()[cid]["method"], "k": cells()[cid]["k"],
                         "dataset": "humaneval", "prompt_index": i, "prompt_sha256": f"p{i}", "n_prompt_tokens": 9,
                         "n_out": 8, "ttft_ms": 10.0, "tpot_ms": 1000 * span / 7, "decode_s": span,
                         "output_ids": list(range(8)), "accept_lengths": None,
                         "extra": {"wasted_row_steps": 1} if b > 1 else {}}
                    out.append({**r, "batch_index": j} if b > 1 else r)
            if cid.startswith("df"):
                out.append({"kind": "spec", "cell_id": cid, "label": "dflash-k3", "dataset": "humaneval",
                            "num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 12 + b,
                            "accepted_per_pos": [8, 4, b]})
    return out


@pytest.fixture(scope="module")
def summary():
    manifest = {"run_id": "batches", "cells": cells(), "config": {"batch_size": [1, 2, 4]}, "platform": "cpu",
                "hardware": {"device": "Test CPU"}}
    return summary_json(records(), manifest)


@pytest.fixture(scope="module")
def rows(summary) -> list[dict]:
    return summary.rows


def test_rows_carry_each_batch_size_s_throughput_and_speedup(rows):
    by = {(r.method, r.batch_size): r for r in rows}
    for b, (ar, df) in RATE.items():
        base, spec = by[("baseline", b)], by[("dflash", b)]
        assert base.n_batches == spec.n_batches == spec.n_batch_pairs == N // b
        assert base.batch_speedup is None
        assert spec.batch_speedup == pytest.approx(df / ar, rel=0.03)
        assert spec.batch_speedup_ci_low < spec.batch_speedup < spec.batch_speedup_ci_high
        assert spec.tok_per_s_total == pytest.approx(df, rel=0.05)
        assert spec.tok_per_s_user_p50 == pytest.approx(df / b, rel=0.05)
        assert spec.wasted_row_steps == (N // b if b > 1 else None)
    assert by[("dflash", 2)].identical_frac is None and by[("dflash", 2)].identical_frac_batched == 1.0
    assert by[("dflash", 1)].identical_frac == 1.0 and by[("dflash", 2)].not_checked is None


def test_section_names_the_crossover_and_labels_the_axis(summary, rows):
    [c] = summary.batch_crossovers
    assert (c.engine, c.workload, c.label, c.result.level, c.levels) == ("jax", "humaneval", "dflash-k3", 4, [1, 2, 4])
    text = batch_markdown(rows, summary.batch_crossovers)
    assert "offline batch size" in text and "the speedup is shown below 1 from B = 4" in text
    assert text.count("| jax | humaneval | dflash-k3 |") == 3
    assert batch_markdown([dataclasses.replace(r, batch_size=1) for r in rows if r.batch_size == 1], []) is None


def test_pareto_front_keeps_the_undominated_points():
    assert pareto_front([(100, 50), (200, 40), (150, 30), (300, 10), (250, 5)]) == [(100, 50), (200, 40),
                                                                                    (300, 10)]


def test_figures_render_with_every_text_inside_the_canvas(rows, tmp_path):
    summary = pd.DataFrame(rows, columns=COLUMNS)
    figs = batch_figures(summary)
    assert set(figs) == {"batch_speedup_vs_batch_size", "batch_pareto"} and all(figs.values())
    speedup = figs["batch_speedup_vs_batch_size"].axes[0]
    [bars] = speedup.containers  # one series: dflash-k3's errorbar
    line = bars[0]
    assert list(line.get_xdata()) == [1, 2, 4]
    assert list(line.get_ydata()) == pytest.approx([RATE[b][1] / RATE[b][0] for b in (1, 2, 4)], rel=0.03)
    for name, fig in figs.items():
        save_figure(fig, tmp_path / f"{name}.png")  # fits the texts (figure_style.fit_text) and writes the file
        fig.canvas.draw()  # laid out again at the figure's own dpi, where the extents below are measured
        drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # every drawn artist, texts included, in inches
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (
            name, drawn)
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_a_run_without_batches_draws_no_batch_figure(rows):
    one = pd.DataFrame([r for r in rows if r.batch_size == 1], columns=COLUMNS)
    assert batch_figures(one) == {"batch_speedup_vs_batch_size": None, "batch_pareto": None}
    assert not math.isnan(one["tok_per_s_total"].astype(float).iloc[0])


def test_the_headline_at_b_above_1_is_the_wall_clock_and_the_tpot_speedup_keeps_its_column():
    """At B = 2 each DFlash batch holds one request that ends early (TPOT 4× AR's) and a straggler (TPOT 1.1× AR's):
    the per-request TPOT speedup reads about 2.1, while the batch, which ends with its straggler, decodes its tokens
    1.1× as fast. `speedup` is the wall clock; `tpot_speedup` keeps the other; at B = 1 both are the TPOT one."""
    cells2 = {"ar": {**CELL, "method": "baseline", "draft": None, "k": 0, "batch_size": 2},
              "df": {**CELL, "method": "dflash", "draft": "d", "k": 3, "batch_size": 2}}
    out = []
    for cid, spans in (("ar", (0.070, 0.070)), ("df", (0.070 / 4, 0.070 / 1.1))):
        for i in range(8):
            j = i // 2
            wobble = 1 + 0.01 * j * (cid == "df")  # DFlash's four batches are not alike: the intervals have a width
            span = spans[i % 2] * wobble
            out.append({"kind": "request", "cell_id": cid, "label": "baseline" if cid == "ar" else "dflash-k3",
                        "engine": "jax", "method": cells2[cid]["method"], "k": cells2[cid]["k"], "dataset": "humaneval",
                        "prompt_index": i, "prompt_sha256": f"p{i}", "n_prompt_tokens": 9, "n_out": 8,
                        "ttft_ms": 10.0, "tpot_ms": 1000 * span / 7, "decode_s": span, "output_ids": list(range(8)),
                        "accept_lengths": None, "extra": {}, "batch_index": j})
    out.append({"kind": "spec", "cell_id": "df", "label": "dflash-k3", "dataset": "humaneval", "num_drafts": 10,
                "num_draft_tokens": 30, "num_accepted_tokens": 12, "accepted_per_pos": [8, 4]})
    manifest = {"run_id": "straggler", "cells": cells2, "config": {"batch_size": [2]}, "platform": "cpu",
                "hardware": {"device": "Test CPU"}}
    spec = {r.method: r for r in summary_json(out, manifest).rows}["dflash"]
    assert spec.tpot_speedup == pytest.approx(math.sqrt(4 * 1.1), rel=0.02)
    assert spec.speedup == spec.batch_speedup == pytest.approx(1.1, rel=0.02)
    assert spec.speedup_ci_low == spec.batch_speedup_ci_low and spec.speedup_ci_high == spec.batch_speedup_ci_high
    assert spec.tpot_speedup_ci_low < spec.tpot_speedup < spec.tpot_speedup_ci_high
    assert spec.speedup_units == 4  # batches
