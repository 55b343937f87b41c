"""report.md, summary.csv and speculation_profile.json of a run, with its figures, all rendered from the run
summarised once (analysis/summary.py: records.jsonl + manifest.json): the sections are rendered by the modules beside
this one."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.analysis.caveats import caveat_lines
from benchmarks.analysis.environments import cell_order, provenance_lines
from benchmarks.analysis.summary import Summary, summarize_run
from benchmarks.analysis.summary_csv import summary_csv, summary_frame
from benchmarks.config.matrix_schema import Matrix
from benchmarks.core.atomic import atomic_write_text, not_a_link
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.guarded import output_folder_problem
from benchmarks.data.datasets import skipped_lines
from benchmarks.figures import run_figures as plots
from benchmarks.records.store import RunStore
from benchmarks.report.batch_report import batch_markdown
from benchmarks.report.capacity_report import capacity_json, capacity_markdown
from benchmarks.report.cost_model_render import cost_model_markdown
from benchmarks.report.drift_report import drift_lines
from benchmarks.report.engines_report import engines_markdown
from benchmarks.report.floors_report import floor_lines, timing_error_lines
from benchmarks.report.profile_report import failed_check_lines, profile_json
from benchmarks.report.published_report import comparison_markdown
from benchmarks.report.serve_report import serve_markdown
from benchmarks.report.tables import acceptance_table, outlier_lines, results_table, settings_table
from benchmarks.report.trees_report import trees_markdown
from benchmarks.report.workloads_report import template_lines, workload_markdown
from verification import distribution, ties

DEFINITIONS = """\
- **TPOT** = (last token time − first token time)/(n_out − 1), prefill excluded; **TTFT** = first token − start.
- **τ** = committed tokens per verify step = 1 + accepted/drafts (includes the bonus token); **α** = accepted/drafted.
- **p_i** = fraction of verify steps with ≥ i accepted drafts. Warm-up prompts are excluded from everything.
- **speedup** = geometric mean over prompts of TPOT_AR/TPOT_M on identical prompts, with its 95 % CI: Student-t on
  the log ratios of the independent units, exp(mean ± t · sd/√n), the units prompts at batch 1, batches at B > 1 and
  waves of C requests at C > 1 (none with one unit or no spread between them, and the table says why; very wide at
  n = 2; docs/statistics.md);
  **mean-ratio** = mean TPOT_AR / mean TPOT_M (the form the published tables use); **pairs** = prompts in the speedup
  (measured by both cells on the same prompt hash, with a TPOT); fewer than n means prompts dropped from the pairing.
- **identical** = fraction of prompts whose greedy tokens equal AR's (lossless check); **same/tie/viol.** = prompts
  identical, diverging first at a numerical tie of the target (bf16 rounding; its widest margin in ulps of the dtype),
  or in violation (docs/lossless.md).
- **τ (prompt mean)** = mean over prompts of each prompt's τ (z-lab's statistic; summary.csv `tau_prompt_mean`);
  the table's τ is pooled over all verify steps."""


def batch_sizes(config: Matrix) -> str:
    """The report's words for the run's offline batch sizes."""
    sizes = config.batch_size
    return f"batch sizes {', '.join(map(str, sizes))} (see Batch)" if sizes else "batch size 1"


def render_report(s: Summary, drawn: plots.Drawn, run_dir: Path) -> str:
    """report.md of a summarised run."""
    rows, verdicts, manifest, provenances = s.rows, s.verdicts, s.manifest, s.provenances
    config, hw = manifest.config, manifest.hardware
    errors = [r for r in rows if r.n_errors]
    origin = provenance_lines(s.environments)
    mixed = origin[0].startswith("**MIXED")
    settings = settings_table(provenances, manifest.cells)
    parts = [
        f"# Run {manifest.run_id}",
        f"- config: `{manifest.config_path}` · created {manifest.created_utc} · git {manifest.git_sha}"
        + (" (the latest invocation's; the units differ, see Provenance)" if mixed else ""),
        f"- platform: {manifest.platform} · hardware: {hw.get('device')} · "
        + " · ".join(f"{k} {v}" for k, v in manifest.packages.items()),
        f"- target: `{config.target}` · max_new_tokens {config.max_new_tokens} · "
        f"prompts per dataset {config.num_prompts} (+{config.warmup_prompts} warm-up, "
        f"excluded) · {batch_sizes(config)} · cells " + cell_order(config),
        *[f"- prompts: {line}" for line in skipped_lines(manifest.prompts_skipped)],
        *[f"- prompts: {line}" for line in template_lines(manifest)],
        *(["", "Settings that change a number, as each engine described itself:", "", settings] if settings else []),
        "", "## Provenance", "\n".join(origin),
        "", "## Definitions", DEFINITIONS,
        "", "## Results", results_table(rows), *outlier_lines(rows),
        *(["", "## Engines side by side", engines] if (engines := engines_markdown(s)) else []),
        *(["", "## Workloads", workloads] if (workloads := workload_markdown(s)) else []),
        "", "## Baseline drift", "\n".join(drift_lines(rows, config, manifest.recorded)),
        "", "## Per-position acceptance", acceptance_table(rows),
        *[f"\n{line}" for line in failed_check_lines(s.speculation_profiles)],
        *[f"\n{line}" for line in caveat_lines(rows, manifest, provenances)],
        "", "## Lossless check (greedy)",
        "\n".join([verdicts.greedy, *(["", *(f"- {line}" for line in verdicts.lines)] if verdicts.lines else [])]),
        *(["", tie_table] if (tie_table := ties.report_markdown(s.records.tie_checks)) else []),
        "", "## Distribution check (T > 0)", distribution.report_markdown(rows),
        "", "## Physical floor", "\n".join(floor_lines(rows, manifest, provenances)
                                            + timing_error_lines(s.timing_errors)),
    ]
    serving = serve_markdown(rows, s.serve_crossovers)
    if serving:
        parts += ["", "## Serving under load", serving]
    capacity = capacity_markdown(s.capacities)
    if capacity:
        parts += ["", "## Capacity at a latency target", capacity]
    batched = batch_markdown(rows, s.batch_crossovers)
    if batched:
        parts += ["", "## Batch", batched]
    trees = trees_markdown(s.units, rows)
    if trees:
        parts += ["", "## Draft trees", trees]
    if errors:
        parts += ["", "## Failed units", "\n".join(f"- {r.engine} {r.label} on {r.dataset}"
                                                    + (f" at concurrency {r.concurrency}" if r.concurrency
                                                       else "") + f": {r.error}" for r in errors)]
    parts += ["", "## Cost model (predicted vs measured speedup)", cost_model_markdown(rows, s.cost_groups)]
    parts += ["", "## Reproduced vs published", comparison_markdown(summary_frame(rows), manifest)]
    if drawn.paths or drawn.failed:
        parts += ["", "## Figures"] + [f"![{f.stem}]({f.relative_to(run_dir).as_posix()})" for f in drawn.paths]
        parts += [f"- not drawn: {name} ({error})" for name, error in drawn.failed]
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class Written:
    """What `write_reports` wrote: the run summarised, and each output (a figure, a group of figures, report.md) that
    raised while rendered, by name with its error; every other output was written."""

    summary: Summary
    failed: list[tuple[str, str]]


# What `report` writes into the run folder (checked before anything is written)
OUTPUTS = ("summary.csv", "speculation_profile.json", "capacity.json", "report.md", "figures")


def check_outputs(run_dir: Path) -> None:
    """BadInput, before anything is read or written, when the run folder cannot be written, or a link stands where an
    output goes: one of the files, figures/, or a file inside it (never written through: docs/outputs.md)."""
    problem = output_folder_problem(run_dir)
    if problem:
        raise BadInput(f"{run_dir}: the run folder, where the report is written, {problem}; give a copy of the run "
                       f"in a folder you may write, or change its permissions")
    for name in OUTPUTS:
        not_a_link(run_dir / name)
    figures = run_dir / "figures"
    linked = sorted(p.name for p in figures.iterdir() if p.is_symlink()) if figures.is_dir() else []
    if linked:
        raise BadInput(f"{figures}: {', '.join(linked[:3])}{' ...' if len(linked) > 3 else ''}: a link stands where "
                       f"a figure goes, and the harness never writes through a link; remove it")


def write_reports(run_dir: Path) -> Written:
    """Recompute summary.csv, speculation_profile.json, figures/ and report.md of a run from its records (and
    capacity.json of a run with a capacity search), the run summarised once. The tables are written first; a figure
    or report.md whose rendering raises is named in `Written.failed` (and report.md says so), never costing the
    others."""
    check_outputs(run_dir)
    summary = summarize_run(RunStore(run_dir))
    table, profile = summary_csv(summary.rows), profile_json(summary.speculation_profiles)  # rendered before writing
    atomic_write_text(run_dir / "summary.csv", table)
    atomic_write_text(run_dir / "speculation_profile.json", profile)
    if summary.capacities:
        atomic_write_text(run_dir / "capacity.json", capacity_json(summary.capacities))
    drawn = (plots.run_figures(summary, run_dir / "figures") if summary.rows or summary.capacities
             else plots.Drawn([], []))
    failed = list(drawn.failed)
    text = plots.guarded("report.md", lambda: render_report(summary, drawn, run_dir), failed)
    if text is None:  # a section's bug costs only report.md: the tables and figures are written above
        text = (f"# Run {summary.manifest.run_id}\n\nThis report could not be rendered ({failed[-1][1]}). "
                f"summary.csv and figures/ hold what was measured; `python -m benchmarks report` on this folder "
                f"renders it again.\n")
    atomic_write_text(run_dir / "report.md", text)
    return Written(summary, failed)
