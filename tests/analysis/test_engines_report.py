"""The engines side by side: the strongest baseline of a dataset across engines, each cell's speedup over it paired on
the same prompts beside the speedup over its own AR, the slower cells marked, and AR tokens compared across engines."""
from __future__ import annotations

import pytest

from benchmarks.analysis.strongest import alone_requests, strongest_baselines
from benchmarks.report.engines_report import engines_markdown
from tests.typed_runs import lines, manifest, request, summary_json

# engine -> (AR TPOT ms, DFlash TPOT ms); fast has the fastest AR, and its DFlash is slower than its AR
ENGINES = {"fast": (1.0, 2.0), "slow": (4.0, 2.5)}
# each cell's own small timing noise per prompt, so that paired ratios have a spread and intervals a width
WOBBLE = {"fast-baseline": [0, 0.004, 0.008, 0.002], "fast-dflash": [0.006, 0, 0.003, 0.009],
          "slow-baseline": [0.002, 0.007, 0, 0.005], "slow-dflash": [0.008, 0.003, 0.006, 0]}


def run(ar_outputs: dict[str, list[list[int]]] | None = None):
    cells, records = {}, []
    for engine, (ar, dfl) in ENGINES.items():
        for method, tpot in (("baseline", ar), ("dflash", dfl)):
            cid = f"{engine}-{method}"
            label = "baseline" if method == "baseline" else "dflash-k15"
            k = 0 if method == "baseline" else 15
            cells[cid] = {"engine": engine, "method": method, "k": k}
            outputs = (ar_outputs or {}).get(engine, [[1, 2, 3]] * 4)
            records += [request(cell_id=cid, engine=engine, method=method, k=k, label=label, prompt_index=i,
                                tpot_ms=tpot * (1 + 0.01 * i) * (1 + WOBBLE[cid][i]),
                                output_ids=outputs[i]) for i in range(4)]
            if method == "dflash":
                records.append({"kind": "spec", "cell_id": cid, "label": label, "dataset": "humaneval",
                                "num_drafts": 1, "num_draft_tokens": 15, "num_accepted_tokens": 1,
                                "accepted_per_pos": [1] + [0] * 14})
    return records, {"cells": cells}


def strongest(records, value):
    m = manifest(value)
    typed = lines(records)
    return strongest_baselines(m.cells, {(r.cell_id, r.workload, None) for r in typed},
                               alone_requests(r for r in typed if r.kind == "request"))


def test_the_fastest_baseline_is_the_strongest_and_slower_cells_are_marked():
    """fast's AR is chosen (on prompt 0 and 3, every third) and compared with on prompts 1 and 2: every other cell is
    two or more times slower than it, shown so by its interval; slow's cells ran apart from it (not interleaved)."""
    records, value = run()
    assert {k: v.cell_id for k, v in strongest(records, value).items()} == {("humaneval", 0.0): "fast-baseline"}
    text = engines_markdown(summary_json(records, value))
    cells = {tuple(c.strip() for c in line.split("|")[3:5]): [c.strip() for c in line.split("|")[8:11]]
             for line in text.splitlines() if "| humaneval |" in line}
    assert cells[("fast", "baseline")] == ["–", "1.00", "strongest baseline"]
    for (engine, label), over_own, over_best, mark in [(("fast", "dflash-k15"), 0.50, 0.50, "slower"),
                                                       (("slow", "dflash-k15"), 1.60, 0.40, "slower, apart"),
                                                       (("slow", "baseline"), None, 0.25, "slower, apart")]:
        own, best, shown = cells[(engine, label)]
        assert (own == "–") == (over_own is None) and shown.split(":")[0] == mark
        if "apart" in mark:  # the host shift that would flip it: the cell's TPOT over the interval's upper end's, - 1
            high = float(best.split("[")[1].split(",")[1].rstrip("]"))
            assert float(shown.split("flips at a ")[1].split(" %")[0]) == pytest.approx(
                100 * (1 / high - 1), abs=0.5 / high**2 + 0.1)  # the shown upper end is rounded to 0.005
        for figure, want in ((own, over_own), (best, over_best)):
            if want is not None:
                x, low, high = map(float, figure.replace("[", "").replace("]", "").replace(",", "").split())
                assert x == pytest.approx(want, rel=0.02) and low <= x <= high and "[" in figure


def test_ar_tokens_are_compared_across_engines():
    records, value = run({"fast": [[1, 2, 3]] * 4, "slow": [[1, 2, 3], [1, 2, 3], [1, 9, 3], [1, 2, 3]]})
    assert "| humaneval | fast | slow | 3/4 | 1 |" in engines_markdown(summary_json(records, value))


def test_one_engine_has_no_section():
    records, value = run()
    keep = {"cells": {c: v for c, v in value["cells"].items() if c.startswith("fast")}}
    assert engines_markdown(summary_json([r for r in records if r["cell_id"].startswith("fast")], keep)) is None


def test_a_baseline_without_requests_is_no_candidate():
    records, value = run()
    records = [r for r in records if r["cell_id"] != "fast-baseline"]
    assert strongest(records, value) == {}


def test_the_figure_has_a_bar_per_cell_and_the_strongest_baseline_at_one():
    import pandas as pd

    from benchmarks.figures.engines_figure import engines_figure

    rows = pd.DataFrame([{"engine": e, "dataset": "humaneval", "label": label, "tau": tau, "run_id": "r",
                          "hardware": "cpu", "target": "t", "strongest_baseline": "fast", "speedup_vs_strongest": s,
                          "speedup_vs_strongest_ci_low": s * 0.9, "speedup_vs_strongest_ci_high": s * 1.1}
                         for e, label, tau, s in (("fast", "baseline", None, 1.0), ("fast", "dflash-k15", 2.0, 0.5),
                                                  ("slow", "baseline", None, 0.25), ("slow", "dflash-k15", 2.0, 0.4))])
    ax = engines_figure(rows).axes[0]
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0.25, 0.4, 0.5, 1.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fast", "slow"]
    assert "strongest baseline (fast AR)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert engines_figure(rows.drop(columns=["speedup_vs_strongest"])) is None
    warm = pd.concat([rows.assign(temperature=t) for t in (0.0, 0.6, 1.0)])  # tiny-sampled.yaml's three
    ax = engines_figure(warm).axes[0]
    assert sorted(t.get_text() for t in ax.get_xticklabels()) == [f"{e} · T={t}" for e in ("fast", "slow")
                                                                   for t in ("0", "0.6", "1")]
    assert len(ax.patches) == 12
