"""Figures of a hand-made run and of the published numbers: files exist, bars show the right values."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from benchmarks.analysis.summary import Summary, summarize_run
from benchmarks.cli import figures as figures_cli
from benchmarks.cli import main
from benchmarks.data.reference import load_k_flat, load_reference
from benchmarks.figures import published_figures
from benchmarks.figures import run_figures as plots
from benchmarks.figures.figure_style import new_figure, save_figure
from benchmarks.records.store import RunStore

DATASETS = ("math500", "humaneval")
# (label, method, k, {dataset: (speedup, ci_low, ci_high, tau, n_prompts)})
SPEC_CELLS = (
    ("dflash-k7", "dflash", 7, {"math500": (3.0, 2.5, 3.4, 5.0, 4), "humaneval": (2.0, 1.8, 2.3, 3.5, 3)}),
    ("dflash-k15", "dflash", 15, {"math500": (3.6, 3.1, 4.0, 6.5, 4), "humaneval": (2.4, 2.0, 2.9, 4.0, 3)}),
)


# A run at one temperature and without a context axis: every figure but those of several temperatures or contexts.
ONE_TEMPERATURE = [n for n in plots.RUN_FIGURES
                   if n not in ("tau_speedup_vs_temperature", "tau_speedup_vs_context", "step_time_vs_context")]


def _summary_row(**kw: object) -> dict[str, object]:
    row = dict(run_id="synthetic", engine="jax", platform="cpu", hardware="Test CPU", target="/m/tiny-target",
               temperature=0.0, max_new_tokens=32, tau=None, acceptance_rate=None, per_position=None,
               tpot_ms_mean=10.0, tpot_ms_p50=10.0, tpot_ms_p90=11.0, tpot_ms_p99=12.0, ttft_ms_mean=5.0,
               output_tok_per_s=100.0, speedup=1.0, speedup_ci_low=None, speedup_ci_high=None,
               speedup_mean_ratio=1.0, identical_frac=None, first_divergence_min=None)
    row.update(kw)
    return row


def make_run(run_dir: Path) -> Path:
    """A run directory with the runner's layout: a baseline and two DFlash cells on two datasets."""
    rows, records, cells = [], [], {}
    n_by_dataset = {"math500": 4, "humaneval": 3}
    for ds in DATASETS:
        rows.append(_summary_row(cell_id="c-base", label="baseline", draft=None, method="baseline", k=0,
                                 dataset=ds, n_prompts=n_by_dataset[ds]))
    cells["c-base"] = {"engine": "jax", "target": "/m/tiny-target", "method": "baseline", "draft": None, "k": 0,
                       "temperature": 0.0, "max_new_tokens": 32, "seed": 0, "engine_options": {}}
    for label, method, k, per_ds in SPEC_CELLS:
        cell_id = f"c-{label}"
        cells[cell_id] = dict(cells["c-base"], method=method, draft="/m/tiny-dflash", k=k)
        for ds, (speedup, lo, hi, tau, n) in per_ds.items():
            p = [round(0.9 ** i, 4) for i in range(1, k + 1)]
            rows.append(_summary_row(cell_id=cell_id, label=label, draft="/m/tiny-dflash", method=method, k=k,
                                     dataset=ds, n_prompts=n, tau=tau, acceptance_rate=(tau - 1) / k,
                                     per_position=json.dumps(p), speedup=speedup, speedup_ci_low=lo,
                                     speedup_ci_high=hi, speedup_mean_ratio=speedup * 1.01,
                                     tpot_ms_mean=10.0 / speedup, identical_frac=1.0))
    for row in rows:
        for i in range(int(row["n_prompts"])):
            records.append({"kind": "request", "cell_id": row["cell_id"], "label": row["label"], "engine": "jax",
                            "method": row["method"], "k": row["k"], "dataset": row["dataset"], "prompt_index": i,
                            "prompt_sha256": f"{row['dataset']}{i}", "n_prompt_tokens": 20, "n_out": 32,
                            "ttft_ms": 5.0, "tpot_ms": float(row["tpot_ms_mean"]) * (1 + 0.05 * i),
                            "decode_s": 0.031 * float(row["tpot_ms_mean"]), "output_ids": list(range(32)),
                            "accept_lengths": None})
        if row["method"] != "baseline":
            records.append({"kind": "spec", "cell_id": row["cell_id"], "label": row["label"],
                            "dataset": row["dataset"], "num_drafts": 10, "num_draft_tokens": 10 * row["k"],
                            "num_accepted_tokens": 20, "accepted_per_pos": [10 - i for i in range(row["k"])]})
    records.append({"kind": "error", "cell_id": "c-base", "label": "baseline", "dataset": "mbpp", "error": "x",
                    "traceback": ""})
    run_dir.mkdir(parents=True)
    manifest = {"run_id": "synthetic", "created_utc": "2026-01-01T00:00:00Z", "config_path": "configs/x.yaml",
                "config": {}, "cells": cells, "git_sha": "0" * 40, "packages": {}, "platform": "cpu",
                "hardware": {"device": "Test CPU", "bandwidth_gbps": None}, "models": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pd.DataFrame(rows).to_csv(run_dir / "summary.csv", index=False)
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "runs" / "synthetic")


def summary_of(run_dir: Path) -> Summary:
    return summarize_run(RunStore(run_dir))


def test_run_figures_written(run_dir: Path) -> None:
    drawn = plots.run_figures(summary_of(run_dir), run_dir / "figures")
    paths = drawn.paths
    assert [p.name for p in paths] == [f"{name}.png" for name in ONE_TEMPERATURE] and drawn.failed == []
    for p in paths:
        assert p.parent == run_dir / "figures"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_bars_heights_whiskers_and_n(run_dir: Path) -> None:
    fig = plots.speedup_figure(pd.read_csv(run_dir / "summary.csv"))
    ax = fig.axes[0]
    bars = {c.get_label(): c for c in ax.containers if hasattr(c, "patches")}
    assert set(bars) == {"dflash-k7", "dflash-k15"}
    assert [t.get_text() for t in ax.get_xticklabels()] == list(DATASETS)
    for label, _, _, per_ds in SPEC_CELLS:
        assert [round(p.get_height(), 6) for p in bars[label].patches] == [per_ds[d][0] for d in DATASETS]
        whiskers = bars[label].errorbar.lines[2][0].get_segments()
        assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in whiskers] == [per_ds[d][1:3] for d in DATASETS]
    assert sorted(t.get_text() for t in ax.texts) == sorted(["n=4", "n=3"] * 2)
    assert "speedup" in ax.get_ylabel() and "×" in ax.get_ylabel()
    assert ax.get_xlabel() == "dataset" and ax.get_title()


def test_tpot_cdf_counts_requests(run_dir: Path) -> None:
    fig = plots.tpot_cdf_figure(plots.requests_frame(summary_of(run_dir).records.requests))
    labels = sorted(line.get_label() for line in fig.axes[0].get_lines())
    assert labels == ["baseline (n=7 requests)", "dflash-k15 (n=7 requests)", "dflash-k7 (n=7 requests)"]
    assert "ms" in fig.axes[0].get_xlabel()


def test_baseline_only_run_skips_spec_figures(tmp_path: Path, run_dir: Path) -> None:
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["cell_id"] == "c-base"))
    drawn = plots.run_figures(summary_of(run_dir), tmp_path / "out")
    assert [p.name for p in drawn.paths] == ["tpot_cdf.png"] and drawn.failed == []


def test_a_failing_figure_costs_only_itself(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A figure whose drawing raises is named (stderr, report.md) with its error, exit 1; the tables, report.md and
    every other figure are written, the same as without the fault."""
    def broken(_rows: pd.DataFrame) -> None:
        raise ValueError("cannot reindex on an axis with duplicate labels")

    clean = _without_errors(run_dir)
    monkeypatch.setattr(plots, "tau_vs_k_figure", broken)
    assert main(["report", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert "error: tau_vs_k could not be rendered (ValueError: cannot reindex on an axis with duplicate labels); " \
           "the run's other outputs were written (exit 1)" in err
    figures = sorted(p.stem for p in (run_dir / "figures").iterdir())
    assert figures == sorted(n for n in ONE_TEMPERATURE if n != "tau_vs_k")
    report = (run_dir / "report.md").read_text()
    assert "- not drawn: tau_vs_k (ValueError: cannot reindex on an axis with duplicate labels)" in report
    assert "## Results" in report and "![speedup_per_dataset](figures/speedup_per_dataset.png)" in report
    assert (run_dir / "summary.csv").read_text() == clean


def _without_errors(run_dir: Path) -> str:
    """Drop the run's failed unit, report it once (exit 0) and return its summary.csv."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["kind"] != "error"))
    assert main(["report", str(run_dir)]) == 0
    return (run_dir / "summary.csv").read_text()


def test_a_failing_report_section_leaves_the_tables(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """report.md whose rendering raises says so in its place (exit 1); summary.csv and the figures are written."""
    from benchmarks.report import report_write

    def broken(*_args: object) -> str:
        raise KeyError("speedup")

    clean = _without_errors(run_dir)
    monkeypatch.setattr(report_write, "acceptance_table", broken)
    assert main(["report", str(run_dir)]) == 1
    assert "error: report.md could not be rendered (KeyError: 'speedup')" in capsys.readouterr().err
    assert "This report could not be rendered (KeyError: 'speedup')" in (run_dir / "report.md").read_text()
    assert len(list((run_dir / "figures").iterdir())) == len(ONE_TEMPERATURE)
    assert (run_dir / "summary.csv").read_text() == clean


def test_published_figures(tmp_path: Path) -> None:
    paths = published_figures.published_figures(tmp_path)
    assert [p.name for p in paths] == [f"{name}.png" for name in published_figures.PUBLISHED_FIGURES]
    ref = load_reference()
    fig = published_figures.published_v5p_figure(ref)
    speedup_ax = fig.axes[0]
    values = ref[(ref["table"] == "tpu_v5p_qwen3_4b") & (ref["stat"] == "value")]
    assert [p.get_height() for p in speedup_ax.containers[0].patches] == list(values["speedup"])
    assert all(t.get_text().endswith("n=8") for t in speedup_ax.texts)
    floor_fig = published_figures.published_k_flat_figure(load_k_flat())
    assert any("floor" in str(h.get_label()) for h in floor_fig.axes[1].collections)


def test_cli_without_run_makes_published_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "runs" / "latest"
    # an explicitly named run that is missing is an error; the default (no run made yet) is not
    assert main(["figures", "--published", "--run", str(missing), "--out", str(tmp_path / "fig")]) == 2  # bad input
    monkeypatch.setattr(figures_cli, "RUNS_DIR", missing.parent)
    assert main(["figures", "--published", "--run", str(missing), "--out", str(tmp_path / "fig")]) == 0
    err = capsys.readouterr().err
    assert "no summarised run" in err and "made only the published figures" in err
    assert sorted(p.name for p in (tmp_path / "fig").glob("*.png")) == sorted(
        f"{n}.png" for n in published_figures.PUBLISHED_FIGURES)


def test_cli_run_figures_go_under_runs(tmp_path: Path, run_dir: Path) -> None:
    assert main(["figures", "--run", str(run_dir), "--out", str(tmp_path / "fig")]) == 0
    out = tmp_path / "fig" / "runs" / "synthetic"
    assert sorted(p.name for p in out.glob("*.png")) == sorted(f"{n}.png" for n in ONE_TEMPERATURE)
    assert not list((tmp_path / "fig").glob("published_*.png"))


def test_a_figure_interrupted_while_saving_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """The figure is written to a temporary file and renamed: a save that dies half-way changes nothing."""
    from matplotlib.figure import Figure

    path = tmp_path / "figures" / "f.png"
    save_figure(new_figure(), path)
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")

    def dies_half_way(self, fname, *args, **kwargs):
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG half")
        else:
            Path(fname).write_bytes(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        save_figure(new_figure(), path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["f.png"]  # no temporary file left behind


def test_tau_and_speedup_against_temperature() -> None:
    rows = [_summary_row(cell_id=f"c{t}", label="dflash-k15", draft="d", method="dflash", k=15, dataset="humaneval",
                         n_prompts=4, temperature=t, tau=tau, tau_prompt_mean=tau + 0.5, speedup=sp,
                         speedup_ci_low=sp - 0.1, speedup_ci_high=sp + 0.1, dist_verdict=verdict)
            for t, tau, sp, verdict in ((0.0, 3.3, 2.0, None), (0.6, 1.3, 1.1, "pass"), (1.0, 1.2, 0.9, "FAIL"))]
    fig = plots.temperature_figure(pd.DataFrame(rows))
    ax_tau, ax_sp = fig.axes[:2]
    pooled, prompt_mean = ax_tau.get_lines()[:2]
    assert list(pooled.get_ydata()) == [3.3, 1.3, 1.2] and list(prompt_mean.get_ydata()) == [3.8, 1.8, 1.7]
    [ring] = [c for c in ax_sp.collections if isinstance(c, PathCollection)]
    assert tuple(ring.get_offsets()[0]) == (1.0, 0.9)  # the failed cell is marked
    assert plots.temperature_figure(pd.DataFrame(rows[:1])) is None


def test_context_figures_plot_tau_speedup_and_step_time_against_prompt_length():
    rows = []
    for ctx, prompt, tau, speedup, ar, step, verify in ((0, 250.0, 3.0, 1.3, 2.0, 5.0, 3.0),
                                                          (1024, 1100.0, 2.0, 0.9, 4.0, 9.0, 6.0)):
        common = dict(context_tokens=ctx, prompt_tokens_mean=prompt, dataset=f"humaneval@ctx{ctx}", n_prompts=4)
        rows.append(_summary_row(cell_id="b", label="baseline", method="baseline", k=0, step_ms=ar, **common))
        rows.append(_summary_row(cell_id="d", label="dflash-k7", method="dflash", k=7, tau=tau, speedup=speedup,
                                 speedup_ci_low=speedup - 0.1, speedup_ci_high=speedup + 0.1, step_ms=step,
                                 verify_step_ms=verify, draft_step_ms=step - verify - 0.5, **common))
    summary = pd.DataFrame(rows)
    fig = plots.context_figure(summary)
    ax_tau, ax_sp = fig.axes
    [tau_line] = ax_tau.get_lines()
    assert list(tau_line.get_xdata()) == [250.0, 1100.0] and list(tau_line.get_ydata()) == [3.0, 2.0]
    assert "humaneval (n=4 prompts)" in tau_line.get_label()
    lines = {line.get_label(): list(line.get_ydata()) for line in plots.step_time_figure(summary).axes[0].get_lines()}
    d = "jax · dflash-k7 · humaneval"
    assert lines == {"jax · baseline · humaneval: AR step": [2.0, 4.0], f"{d}: step": [5.0, 9.0],
                     f"{d}: verify": [3.0, 6.0], f"{d}: draft": [1.5, 2.5]}
    one = summary[summary["context_tokens"] == 0]
    assert plots.context_figure(one) is None and plots.step_time_figure(one) is None  # one length: no figure
