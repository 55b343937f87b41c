"""report.md and summary.csv of a run, with its figures, all recomputed from records.jsonl + manifest.json: the
sections are rendered by the modules beside this one, and the verdicts computed once (verification/lossless.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.analysis.batch_report import batch_markdown
from benchmarks.analysis.caveats import caveat_lines
from benchmarks.analysis.drift import drift_lines
from benchmarks.analysis.engines_report import engines_markdown
from benchmarks.analysis.environments import cell_order, provenance_lines, used_provenances
from benchmarks.analysis.floors import floor_lines, timing_error_lines
from benchmarks.analysis.serve_report import serve_markdown
from benchmarks.analysis.summary import COLUMNS, summarize
from benchmarks.analysis.tables import acceptance_table, results_table, settings_table
from benchmarks.analysis.workloads import template_lines, workload_markdown
from benchmarks.core.datasets import skipped_lines
from benchmarks.core.store import RunStore, atomic_write_text
from verification import distribution, ties
from verification.lossless import Verdicts, judge

DEFINITIONS = """\
- **TPOT** = (last token time − first token time)/(n_out − 1), prefill excluded; **TTFT** = first token − start.
- **τ** = committed tokens per verify step = 1 + accepted/drafts (includes the bonus token); **α** = accepted/drafted.
- **p_i** = fraction of verify steps with ≥ i accepted drafts. Warm-up prompts are excluded from everything.
- **speedup** = geometric mean over prompts of TPOT_AR/TPOT_M on identical prompts, with its 95 % CI: Student-t on
  the per-prompt log ratios, exp(mean ± t · sd/√n) (none at n = 1, very wide at n = 2; docs/statistics.md);
  **mean-ratio** = mean TPOT_AR / mean TPOT_M (the form the published tables use); **pairs** = prompts in the speedup
  (measured by both cells on the same prompt hash, with a TPOT); fewer than n means prompts dropped from the pairing.
- **identical** = fraction of prompts whose greedy tokens equal AR's (lossless check); **same/tie/viol.** = prompts
  identical, diverging first at a numerical tie of the target (bf16 rounding; its widest margin in ulps of the dtype),
  or in violation (docs/lossless.md).
- **τ (prompt mean)** = mean over prompts of each prompt's τ (z-lab's statistic; summary.csv `tau_prompt_mean`);
  the table's τ is pooled over all verify steps."""


def batch_sizes(config: dict[str, Any]) -> str:
    """The report's words for the run's offline batch sizes."""
    sizes = config.get("batch_size")
    return f"batch sizes {', '.join(map(str, sizes))} (see Batch)" if sizes else "batch size 1"


@dataclass(frozen=True)
class RunReport:
    """What a report was written from: the summary rows and their verdicts."""

    rows: list[dict[str, Any]]
    verdicts: Verdicts


def render_report(rows: list[dict[str, Any]], verdicts: Verdicts, manifest: dict[str, Any], figures: list[Path],
                  run_dir: Path, records: list[dict[str, Any]],
                  provenances: dict[str, dict[str, Any]] | None = None) -> str:
    """report.md; `provenances` are the records the units name (benchmarks.core.store.RunStore.provenances)."""
    from benchmarks.analysis.cost_model import cost_model_markdown
    from benchmarks.analysis.published_report import comparison_markdown

    provenances = provenances or {}
    hw = manifest.get("hardware") or {}
    pk = manifest.get("packages") or {}
    errors = [r for r in rows if r["n_errors"]]
    origin = provenance_lines(records, provenances)
    mixed = origin[0].startswith("**MIXED")
    settings = settings_table(provenances, manifest.get("cells") or {})
    parts = [
        f"# Run {manifest['run_id']}",
        f"- config: `{manifest.get('config_path')}` · created {manifest.get('created_utc')} · "
        f"git {manifest.get('git_sha')}"
        + (" (the latest invocation's; the units differ, see Provenance)" if mixed else ""),
        f"- platform: {manifest.get('platform')} · hardware: {hw.get('device')} · "
        + " · ".join(f"{k} {v}" for k, v in pk.items()),
        f"- target: `{manifest['config']['target']}` · max_new_tokens {manifest['config']['max_new_tokens']} · "
        f"prompts per dataset {manifest['config']['num_prompts']} (+{manifest['config']['warmup_prompts']} warm-up, "
        f"excluded) · {batch_sizes(manifest['config'])} · cells " + cell_order(manifest["config"]),
        *[f"- prompts: {line}" for line in skipped_lines(manifest.get("prompts_skipped") or {})],
        *[f"- prompts: {line}" for line in template_lines(manifest)],
        *(["", "Settings that change a number, as each engine described itself:", "", settings] if settings else []),
        "", "## Provenance", "\n".join(origin),
        "", "## Definitions", DEFINITIONS,
        "", "## Results", results_table(rows),
        *(["", "## Engines side by side", engines] if (engines := engines_markdown(rows, records)) else []),
        *(["", "## Workloads", workloads] if (workloads := workload_markdown(rows, manifest, records)) else []),
        "", "## Baseline drift", "\n".join(drift_lines(rows, manifest["config"])),
        "", "## Per-position acceptance", acceptance_table(rows),
        *[f"\n{line}" for line in caveat_lines(rows, manifest, provenances)],
        "", "## Lossless check (greedy)",
        "\n".join([verdicts.greedy, *(["", *(f"- {line}" for line in verdicts.lines)] if verdicts.lines else [])]),
        *(["", tie_table] if (tie_table := ties.report_markdown(records)) else []),
        "", "## Distribution check (T > 0)", distribution.report_markdown(rows),
        "", "## Physical floor", "\n".join(floor_lines(rows, manifest, provenances) + timing_error_lines(records)),
    ]
    serving = serve_markdown(rows)
    if serving:
        parts += ["", "## Serving under load", serving]
    batched = batch_markdown(rows)
    if batched:
        parts += ["", "## Batch", batched]
    if errors:
        parts += ["", "## Failed units", "\n".join(f"- {r['engine']} {r['label']} on {r['dataset']}"
                                                    + (f" at concurrency {r['concurrency']}" if r.get("concurrency")
                                                       else "") + f": {r['error']}" for r in errors)]
    parts += ["", "## Cost model (predicted vs measured speedup)", cost_model_markdown(rows, records, manifest)]
    parts += ["", "## Reproduced vs published", comparison_markdown(pd.DataFrame(rows, columns=COLUMNS), manifest)]
    if figures:
        parts += ["", "## Figures"] + [f"![{f.stem}]({f.relative_to(run_dir).as_posix()})" for f in figures]
    return "\n".join(parts) + "\n"


def write_reports(run_dir: Path) -> RunReport:
    """Recompute summary.csv, figures/ and report.md of a run from its records; return the rows and verdicts."""
    from benchmarks.analysis.figures import run_figures

    store = RunStore(run_dir)
    manifest = store.manifest()
    records = store.records()
    rows = summarize(records, manifest)
    verdicts = judge(rows, manifest)
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({c: "Int64" for c in (
        "first_divergence_min", "n_identical", "n_ties", "n_violations", "first_violation")})
    atomic_write_text(run_dir / "summary.csv", frame.to_csv(index=False))
    figures = run_figures(run_dir) if rows else []
    provenances = used_provenances(records, store.provenances())
    atomic_write_text(run_dir / "report.md",
                      render_report(rows, verdicts, manifest, figures, run_dir, records, provenances))
    return RunReport(rows, verdicts)
