"""The report's baseline-drift section: the baseline measured before and after its speculative cells."""
from __future__ import annotations

from benchmarks.config.matrix_schema import Matrix
from benchmarks.core.numbers import as_float, is_number
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.shown import DATASET, ENGINE, TEMPERATURE, Shown, render, value


def _drift_ci(r: SummaryRow) -> str:
    low, high = r.baseline_drift_ci_low, r.baseline_drift_ci_high
    ci = f" [{100 * low:+.1f}, {100 * high:+.1f}]" if is_number(low) and is_number(high) else " [–]"
    return f"{100 * as_float(r.baseline_drift):+.1f} %{ci}"


# One row per (dataset, engine, temperature): its baseline's recheck, and the speedups the drift flags.
DRIFT_TABLE: tuple[Shown, ...] = (
    DATASET, ENGINE, TEMPERATURE,
    value("prompts", "n_drift_pairs"), value("TPOT before ms", "baseline_tpot_before_ms"),
    value("TPOT after ms", "baseline_tpot_after_ms"),
    Shown("drift [95% CI, %]", ("baseline_drift", "baseline_drift_ci_low", "baseline_drift_ci_high"), _drift_ci),
    Shown("flagged speedups", ("label", "drift_flag"), lambda r: ""),  # filled per run: `drift_spec`
)


def drift_spec(flagged: dict[tuple[str, str, float], str]) -> tuple[Shown, ...]:
    """DRIFT_TABLE with each (dataset, engine, temperature)'s flagged speedups."""
    return (*DRIFT_TABLE[:-1], Shown(DRIFT_TABLE[-1].header, DRIFT_TABLE[-1].draws,
                                     lambda r: flagged[(r.dataset, r.engine, r.temperature)]))


def drift_lines(rows: list[SummaryRow], config: Matrix, recorded: frozenset[str]) -> list[str]:
    """The baseline's TPOT before and after its speculative cells per (dataset, engine, temperature), the drift with
    its CI, the speedups it flags, and the rule (`metrics.drift_flag`); why nothing was rechecked where nothing was."""
    if config.interleave:
        return ["Cells ran interleaved, prompt by prompt: a change in the host's speed slowed every cell alike, so "
                "the baseline needed no recheck."]
    checked = [r for r in rows if is_number(r.baseline_drift)]
    ray = ("**Drift is unchecked** for what ran as Ray actors (`executor: ray`, the latest invocation): cells ran "
           "concurrently and on whichever node had room, so the baseline was not measured again, since a recheck on "
           "its own node cannot see the node or the neighbours each speculative cell had. A speedup may compare two "
           "nodes, or cells that contended for one (each unit's provenance names its node, `ray_node`). Run the "
           "cells interleaved (`interleave: true`: one actor takes every prompt on every cell in turn) or with "
           "`executor: local` for a checked speedup.")
    if config.executor == "ray" and not checked:
        return [ray]
    if not checked:
        return ["The baseline was not measured again after its speculative cells (`drift_prompts: 0`, no baseline, "
                "or no recheck finished): nothing shows whether the host's speed moved between cells."]
    families: dict[tuple[str, str, float], list[SummaryRow]] = {}
    for r in checked:
        families.setdefault((r.dataset, r.engine, r.temperature), []).append(r)
    flags = {key: ", ".join(r.label for r in rs if r.drift_flag is True) or "none" for key, rs in families.items()}
    body = [rs[0] for rs in families.values()]
    prompts = config.drift_prompts if "drift_prompts" in recorded else None  # as the run's manifest recorded it
    flagged = sum(r.drift_flag is True for r in checked)
    unknown = sum(r.drift_flag is None for r in checked)
    return ([ray + " The rechecks below are from an earlier invocation that ran the cells locally.", ""]
            if config.executor == "ray" else []) + [
            f"Cells ran one after another. After the last speculative cell compared with it, each baseline was loaded "
            f"again and measured on {prompts} of the measured prompts (`drift_prompts`, at most "
            f"n: the table's prompts), evenly spaced from the first (warm-up first). Before/after = geometric-mean "
            f"TPOT of those prompts in the baseline's measurement and in its recheck; drift = after/before − 1, with "
            f"the Student-t 95 % CI of the mean per-prompt ln(after/before): the prompts' own run-to-run noise is the "
            f"drift's noise model (summary.csv `baseline_tpot_before_ms`, `baseline_tpot_after_ms`, `baseline_drift`, "
            f"`baseline_drift_ci_low/high`, `n_drift_pairs`, `drift_flag`).", "",
            render(drift_spec(flags), body),
            "",
            "A speedup is flagged (DRIFT in the results) when the drift is real, its CI excluding 0, and large, "
            "|ln(1 + drift)| > ½ · ln(CI high / CI low) of the speedup: a baseline that moved by 1 + drift moves "
            "the speedup by that factor, out of its own 95 % CI, so the figure reflects when the cells ran as much as "
            "the method. The recheck follows the speculative cells: a load that came and went while only they ran "
            "leaves no trace in it (interleaving guards against that). "
            + (f"{unknown} speedup(s) cannot be judged (fewer than 2 recheck prompts, or a speedup of one prompt). "
               if unknown else "")
            + (f"**{flagged} speedup(s) flagged**: rerun on a quiet host (FRESH=1), or run the cells interleaved "
               f"(`interleave: true`) where the engine allows." if flagged else "No speedup is flagged.")]
