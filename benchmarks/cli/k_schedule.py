"""`cost-model --schedule`: the K to run at each batch size, from a run's τ(K) and a step cost (the run's own steps,
a chip's roofline, calibrated or not, or the verify timed on a chip), with each engine's config written into the run
folder (benchmarks/analysis/k_schedule_compute.py, docs/k-schedule.md); with --tree, a draft tree's node budget at
each batch size from a run's τ(b) (benchmarks/analysis/budget_schedule.py)."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.analysis import budget_schedule
from benchmarks.analysis import k_schedule_compute as ksd
from benchmarks.analysis.calibration_check import roofline_held_out
from benchmarks.analysis.cost_model_compute import Engine, curve_problems, kflat_batch_points, read_kflat
from benchmarks.analysis.k_schedule_compute import schedule_of
from benchmarks.analysis.summary import Summary, summarize_run
from benchmarks.analysis.tree_curve import PATHS, ladder, tree_curve
from benchmarks.cli.report import run_folder
from benchmarks.config.inputs import InputProblems, model_config
from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core.atomic import atomic_write_text, output_folder
from benchmarks.core.cells import Cell
from benchmarks.core.exit_codes import Exit
from benchmarks.core.guarded import read_csv_text
from benchmarks.core.metrics import mean_interval
from benchmarks.core.shapes import SHAPES, DraftConfig, ModelConfig
from benchmarks.decide import k_schedules
from benchmarks.hardware import measure, roofline, step_model
from benchmarks.hardware.chips import CHIPS
from benchmarks.hardware.roofline import Device
from benchmarks.records.store import RunStore
from benchmarks.report.cost_model_render import fitted_markdown, held_out_markdown
from benchmarks.report.k_schedule_render import (
    calibration_markdown,
    choices_markdown,
    config_files,
    configs_markdown,
    grid_markdown,
)


def run_engine(cells: list[Cell], args: argparse.Namespace, itemsize: int) -> Any:
    """A run's own target and draft (their config.json), at the K of its largest dflash cell (a draft tree's cell:
    its block, K = block size − 1)."""

    dflash = [c for c in cells if c.method in ("dflash", "ddtree") and c.draft]
    if not dflash:
        raise ConfigError(f"{args.tau_from}: the run has no dflash cell to take τ from")
    top = max(dflash, key=lambda c: c.k)
    dcfg = DraftConfig.from_hf(_model_config(str(top.draft), "draft", args.tau_from))
    queries = top.k + 1 if top.engine_options.get("draft_queries") == "k+1" else dcfg.block_size
    if args.shape:  # the run's draft depth and taps at the named target's widths
        shape = SHAPES[args.shape]
        layers = dataclasses.replace(shape, num_layers=dcfg.layers.num_layers, qk_norm=True)
    else:
        shape, layers = ModelConfig.from_hf(_model_config(top.target, "target", args.tau_from)), dcfg.layers
    return Engine(shape, layers, len(dcfg.target_layer_ids), top.k or dcfg.block_size - 1, queries, args.context,
                  itemsize)

def _model_config(ref: str, role: str, run: Path) -> Any:
    """The config.json of a run's model (a folder, or a hub id's cached snapshot); ConfigError, or Lacking with the
    command that fetches it, where this machine cannot read it."""
    found = InputProblems()
    config = model_config(ref, role, f"--tau-from {run}", found)
    found.raise_any()
    if config is None:
        raise ConfigError(f"--tau-from {run}: {role} {ref!r} has no config.json to price its steps by; give --shape")
    return config


DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64]
OUT_FOLDER = "k_schedule"


@dataclass(frozen=True)
class Source:
    """What a schedule is derived from on one workload: τ(K) of its largest-K speculative cell, that cell and the
    run's measured (B, K) grid."""

    workload: str
    engine: str
    top: Cell
    curve: Any  # analysis.k_schedule.TauCurve
    grid: dict[tuple[int, int], Any]

    @property
    def taus(self) -> dict[int, Any]:
        return self.curve.taus()


def sources(summary: Summary, where: Path) -> list[Source]:
    """Per (engine, workload) with a speculative cell: τ(K) from its largest K (at B = 1 where it ran there: τ is
    assumed not to depend on B) and the measured grid."""

    spec = [u for u in summary.units if u.speculative and not u.cell.tree_budget and u.level is None and u.reqs
            and any(r.accept_lengths for r in u.reqs)]
    out = []
    for engine, workload in dict.fromkeys((u.cell.engine, u.workload) for u in spec):
        mine = [u for u in spec if (u.cell.engine, u.workload) == (engine, workload)]
        top = max(mine, key=lambda u: (u.cell.k, -(u.cell.batch_size or 1)))
        out.append(Source(workload, engine, top.cell, ksd.tau_curve(top.reqs),
                          ksd.grid(summary.units, workload, engine)))
    if not out:
        raise ConfigError(f"{where}: no speculative row with accepted lengths to take τ(K) from; run a dflash (or "
                          "eagle3) cell at the largest K of interest")
    return out


def _matrix_base(summary: Summary, src: Source | TreeSource) -> dict[str, Any]:
    """The run's own matrix settings that the schedule's matrix keeps (its model files, workload and budget)."""
    keep = ("target", "drafts", "block_size", "max_new_tokens", "num_prompts", "warmup_prompts", "seed",
            "engine_options")
    config = vars(summary.manifest.config)
    base = {key: config[key] for key in keep if config[key] is not None}
    return {"name": f"{summary.manifest.run_id or 'run'}-ksched"[:80], **base, "engine": src.engine,
            "datasets": [src.workload], "temperature": src.top.temperature}


@dataclass(frozen=True)
class TreeSource:
    """What a budget schedule is derived from on one workload: τ(b) of its largest-budget tree cell, that cell and
    the run's measured (B, budget) grid."""

    workload: str
    engine: str
    top: Cell
    curve: ksd.TauCurve
    grid: dict[tuple[int, int], ksd.GridCell]


def tree_sources(summary: Summary, where: Path) -> list[TreeSource]:
    """Per (engine, workload) with a draft-tree cell whose requests record their accepted paths: τ(b) from its
    largest budget (at B = 1 where it ran there) and the measured (B, budget) grid."""

    trees = [u for u in summary.units if u.cell.tree_budget and u.level is None
             and any((r.extra or {}).get(PATHS) for r in u.reqs)]
    out = []
    for engine, workload in dict.fromkeys((u.cell.engine, u.workload) for u in trees):
        mine = [u for u in trees if (u.cell.engine, u.workload) == (engine, workload)]
        top = max(mine, key=lambda u: (u.cell.tree_budget, -(u.cell.batch_size or 1)))
        out.append(TreeSource(workload, engine, top.cell, tree_curve(top.reqs, top.cell.tree_budget),
                              budget_schedule.tree_grid(summary.units, workload, engine)))
    if not out:
        raise ConfigError(f"{where}: no draft-tree row whose requests record their accepted paths ({PATHS}) to take "
                          "τ(b) from; run a ddtree cell at the largest budget of interest")
    return out


def from_one(choices: list[Any], folder: Path, src: Source | TreeSource) -> list[Any]:
    """A schedule's choices, which start at B = 1; ConfigError where no step was priced there."""
    if not choices or choices[0].batch != 1:
        raise ConfigError(f"{folder}: no step priced at B = 1 for {src.engine} on {src.workload}; a schedule starts "
                          "there (run the cells at B = 1 too)")
    return choices


def tree_schedule_main(args: argparse.Namespace, device: Any = None, itemsize: int = 4,
                       terms: step_model.Terms | None = None) -> int:
    """The node budget at each B: τ(b) from a run's largest budget (RUN_DIR, or --tau-from with --chip), the step at
    (B, budget) from the run's own steps at its budgets (linear in between), or with --chip the chip's roofline or
    the terms fitted to its grid (`terms`); the prediction beside the run's measured grid where it has two budgets;
    written into the run folder."""

    folder = run_folder(args.tau_from if args.chip else args.run_dir)  # the run's own grid is not the chip's
    summary = summarize_run(RunStore(folder))
    for src in tree_sources(summary, folder):
        budgets = sorted({*ladder(src.top.tree_budget, 1), *(b for _, b in src.grid)})
        grid_bs = sorted({b for b, _ in src.grid})
        if args.chip:
            engine = run_engine([src.top], args, itemsize)
            cost = (budget_schedule.fitted_cost(engine, terms) if terms is not None
                    else budget_schedule.chip_cost(engine, device))
            batches = args.batch or DEFAULT_BATCHES
            how = (f"the step at each (B, budget) from the terms of {args.fit_from}" if terms is not None else
                   f"the step at each (B, budget) on {device.name} ({device.source}) at the roofline plus "
                   f"{device.overhead_s * 1e3:.3f} ms per forward pass")
            how += f": the draft over its block of {engine.queries}, the verify over B × (budget + 1) rows"
        else:
            cost, batches = ksd.run_costs(src.grid), grid_bs or [1]
            how = ("the step at (B, budget) from the steps measured at budgets "
                   f"{', '.join(str(b) for b in sorted({b for _, b in src.grid}))} (0: AR), linear in the budget, so "
                   "in the verify's rows, in between")
        choices = from_one(budget_schedule.derive(batches, src.curve, cost, budgets), folder, src)
        about = (f"## {src.engine} on {src.workload}: the draft tree's budget\n\nτ(b) from {src.top.label} at B = "
                 f"{src.top.batch_size} (each step's accepted path cut at each smaller budget; assumed not to depend "
                 f"on B); {how}. Margin: the best budget's tok/s over the next best's − 1, as the K schedule's "
                 "(docs/k-schedule.md).")
        text = choices_markdown(choices, about, "budget")
        measured = sorted({b for _, b in src.grid})
        if len(measured) > 1 and not args.chip:
            check = budget_schedule.derive(grid_bs, src.curve, cost, measured)
            text += ("\n\nThe prediction among the budgets measured, beside the run's measured grid (tok/s of the "
                     "batch with its 95 % interval over the batches):\n\n" + grid_markdown(check, src.grid, "budget"))
        name = f"{args.chip + '-' if args.chip else ''}{src.engine}-{src.workload}-tree"
        print(write_tree_schedule(folder, name, choices, text, _matrix_base(summary, src)))
    return Exit.OK


def write_tree_schedule(folder: Path, name: str, choices: Any, text: str, base: dict[str, Any]) -> str:
    """The budget schedule's tables and (where a tree pays at every B) its matrix written under
    folder/k_schedule/name/; returns the Markdown printed."""

    chosen = budget_schedule.schedule(choices)
    out = output_folder(output_folder(folder / OUT_FOLDER) / name)
    if all(chosen.values()):
        ranges = k_schedules.from_choices(chosen).as_mapping()
        matrix = {**base, "methods": ["baseline", "ddtree"], "tree_budget": ranges, "batch_size": list(ranges)}
        body = yaml.safe_dump(matrix, sort_keys=False)
        atomic_write_text(out / "matrix.yaml", body)
        text += f"\n\nWritten to {out}: `matrix.yaml`:\n\n```yaml\n{body.rstrip()}\n```\n"
    else:
        plain = min(b for b, budget in chosen.items() if not budget)
        text += (f"\n\nNo tree pays from B = {plain} on (budget 0: plain decoding there); no matrix written. "
                 f"Written to {out}.")
    atomic_write_text(out / "schedule.md", text + "\n")
    return text


def write_schedule(folder: Path, name: str, choices: Any, text: str, base: dict[str, Any], max_batch: int) -> str:
    """The schedule's configs and its tables written under folder/k_schedule/name/; returns the Markdown printed."""

    files = config_files(schedule_of(choices), base, max_batch)
    out = output_folder(output_folder(folder / OUT_FOLDER) / name)
    for file, body in files.items():
        atomic_write_text(out / file, body + "\n")
    md = f"{text}\n\nWritten to {out}:\n\n{configs_markdown(files)}"
    atomic_write_text(out / "schedule.md", md + "\n")
    return md


def grid_check(src: Source, cost: Any, against: Path | None) -> str:
    """The prediction among the Ks measured, beside a measured K × B grid: the run's own, or `against`'s (a
    replicate). τ at each B is what the run's static batches see where its engine keeps finished rows: the measured
    engine's tail, whatever priced the steps. Empty where the grid has one K."""

    grid, where = src.grid, "the measured grid"
    if against:
        other = summarize_run(RunStore(run_folder(against)))
        theirs = sources(other, against)
        same = [o.grid for o in theirs if (o.engine, o.workload, o.top.temperature) ==
                (src.engine, src.workload, src.top.temperature)]
        if not same:
            has = ", ".join(f"{o.engine} on {o.workload} at {o.top.temperature:g}" for o in theirs)
            raise ConfigError(f"--check-against {against}: no grid of {src.engine} on {src.workload} at temperature "
                              f"{src.top.temperature:g} (it has {has}); give a replicate of the run")
        grid, where = same[0], f"the grid measured in {other.manifest.run_id or against}"
    grid_ks = sorted({k for _, k in grid})
    if len(grid_ks) < 2:
        return ""
    check = ksd.derive_batched(sorted({b for b, _ in grid}), src.curve, src.grid, cost, grid_ks)
    return (f"\n\nThe prediction among the Ks measured, beside {where} (tok/s of the batch with its 95 % interval "
            "over the batches); it holds where the predicted best K's measured tok/s lies within the measured best's "
            "interval or within 5 % of it:\n\n" + grid_markdown(check, grid))


def _calibration_points(summary: Summary, engine: str) -> dict[int, float]:
    """The run's AR step times (ms) per B of one engine, pooled over its workloads' units."""

    by_b: dict[int, list[float]] = {}
    for u in summary.units:
        if not u.speculative and u.level is None and u.cell.engine == engine and u.reqs:
            by_b.setdefault(u.cell.batch_size or 1, []).extend(ksd.unit_step_ms(u.reqs))
    return {b: mean_interval(v).value for b, v in sorted(by_b.items())}


TOK_PER_S_MAX = 1e9  # a plain-decoding throughput no chip reaches: a table beyond it is no measurement


def published_points(path: Path) -> dict[int, float]:
    """A published tok/s-per-batch table (CSV with batch_size and tok_per_s_total, through the guarded reader): the
    AR step time (ms) per B."""

    columns = ("batch_size", "tok_per_s_total")
    try:
        frame = read_csv_text(path, columns)
        if any(c not in frame.columns for c in columns) or frame.empty:
            raise ValueError(f"{path}: no rows of batch_size and tok_per_s_total")
        rows = [(float(r.batch_size), float(r.tok_per_s_total)) for r in frame.itertuples()]
    except ValueError as err:
        raise ConfigError(f"--calibrate-from {err}: expected a CSV with columns batch_size and tok_per_s_total "
                          "(plain decoding), or a run folder") from None
    if any(b < 1 or b != int(b) or not 0 < tps < TOK_PER_S_MAX for b, tps in rows):
        raise ConfigError(f"--calibrate-from {path}: batch sizes must be whole numbers >= 1 and tok/s above 0 and "
                          f"below {TOK_PER_S_MAX:.0e}")
    twice = sorted({int(b) for b, _ in rows if sum(b == o for o, _ in rows) > 1})
    if twice:
        raise ConfigError(f"--calibrate-from {path}: batch size {', '.join(map(str, twice))} given more than once; "
                          "keep one row per batch size")
    points = {int(b): 1e3 * b / tps for b, tps in rows}
    problems = curve_problems(points)
    if problems:
        raise ConfigError(f"--calibrate-from {path}: " + "; ".join(problems))
    return points


def schedule_main(args: argparse.Namespace) -> int:
    """A run's own schedule: τ(K) from its largest K, the step at (B, K) from its measured Ks (or the calibrated
    model of --calibrate-from), beside the measured grid; configs written into the run folder."""

    folder = run_folder(args.run_dir)
    summary = summarize_run(RunStore(folder))
    for src in sources(summary, folder):
        batches = sorted({b for b, _ in src.grid}) or [1]
        cal_text = ""
        if args.calibrate_from:
            cost, cal_text = _cpu_calibrated(args, summary, src)
            how = f"the step at (B, K) from the AR curve of {args.calibrate_from} (calibrated roofline of this CPU)"
        else:
            measured = sorted({k for _, k in src.grid if k})
            unmeasured = sorted(set(args.cost_ks or []) - set(measured))
            if unmeasured:
                raise ConfigError(f"--cost-ks {','.join(map(str, args.cost_ks))}: {src.engine} on {src.workload} "
                                  f"measured no K = {', '.join(map(str, unmeasured))}; give Ks it measured "
                                  f"({', '.join(map(str, measured)) or 'none'})")
            cost = ksd.run_costs(src.grid, args.cost_ks)
            ks = args.cost_ks or measured
            how = f"the step at (B, K) from the steps measured at K = {', '.join(map(str, ks))}, linear in between"
        if not args.schedule:
            print(f"## {src.engine} on {src.workload}\n\n{cal_text}")
            continue
        choices = from_one(ksd.derive_batched(batches, src.curve, src.grid, cost), folder, src)
        about = (f"## {src.engine} on {src.workload}\n\nτ(K) from {src.top.method} K = {src.top.k} at B = "
                 f"{src.top.batch_size} (accepted lengths cut at each K; assumed not to depend on B, but where the "
                 f"engine's static batches keep their finished rows, τ at B counts the row-steps they ride along "
                 f"until the batch's last request ends, each request's steps at K its tokens over its own τ(K)); "
                 f"{how}. "
                 "Margin: the best K's tok/s over the next best's − 1; its bounds compare the best with every other K "
                 "(Bonferroni over them, the best chosen on the same data), τ's ratio paired over the prompts "
                 "(batches) and the two steps' intervals combined on the log scale (docs/statistics.md).")
        text = choices_markdown(choices, about)
        text += grid_check(src, cost, args.check_against)
        if cal_text:
            text += "\n\n" + cal_text
        name = f"{src.engine}-{src.workload}" + (f"-cost-ks-{'-'.join(map(str, args.cost_ks))}" if args.cost_ks else
                                                  "-calibrated" if args.calibrate_from else "")
        name += f"-checked-on-{args.check_against.name}" if args.check_against else ""
        print(write_schedule(folder, name, choices, text, _matrix_base(summary, src), max(batches)))
    return Exit.OK


def _cpu_calibrated(args: argparse.Namespace, summary: Summary, src: Source) -> tuple[Any, str]:
    """The step cost on this CPU from the roofline calibrated on the AR curve of --calibrate-from (a run folder),
    and the calibration's table against the measured steps."""

    if args.calibrate_from.suffix == ".csv":
        raise ConfigError("--calibrate-from a published table needs --chip (whose peak it is a fraction of)")
    other = summarize_run(RunStore(run_folder(args.calibrate_from)))
    points = _calibration_points(other, src.engine)
    if len(points) < 2:
        raise ConfigError(f"--calibrate-from {args.calibrate_from}: AR baselines of {src.engine} at {len(points)} "
                          "batch size(s); the fit needs two or more")
    dtype = str(src.top.engine_options.get("dtype") or summary.manifest.config.engine_options.get("dtype")
                or "float32")
    itemsize = 2 if dtype == "bfloat16" else 4
    reqs = [r for u in summary.units if u.cell == src.top for r in u.reqs]
    context = round(sum(r.n_prompt_tokens + r.n_out / 2 for r in reqs) / len(reqs)) if reqs else 256
    ns = argparse.Namespace(shape=None, context=context, tau_from=args.calibrate_from)
    engine = run_engine([src.top], ns, itemsize)
    cpu = Device("this CPU", measure.read_bytes_per_s(), measure.matmul_flops_per_s(dtype),
                 "measured on this machine: read stream, a large XLA matmul")
    cal = ksd.calibrate(points, engine, cpu)
    cost = ksd.chip_cost(engine, cal.device(cpu))
    left_out = held_out_markdown("each AR step predicted by the roofline calibrated on the others (leave one out)",
                                 roofline_held_out(points, engine, cpu), step_model.TOLERANCE)
    return cost, calibration_markdown(cal, cost, src.grid) + "\n\n" + left_out


def calibrated_terms(args: argparse.Namespace, engine: Engine) -> tuple[step_model.Terms, str]:
    """The step terms calibrated on the published plain-decoding curve of --calibrate-from at the engine's shapes and
    context: the per-pass and per-request costs fitted; the bandwidth the chip's datasheet's, the FLOP efficiency
    --rows-half's (default the roofline's), both assumed, as the text says."""
    chip = CHIPS[args.chip]
    peak = chip.bf16_flops_per_s if engine.itemsize == 2 else chip.fp32_flops_per_s
    points = [step_model.Measured(f"B={b}", dataclasses.replace(engine, batch=b).ar_step(), b, ms / 1e3)
              for b, ms in sorted(published_points(args.calibrate_from).items())]
    rows_half = args.rows_half if args.rows_half is not None else 0.0
    sources = {"pass_s": "fitted: the curve's intercept, less the weights at the datasheet's bandwidth",
               "request_s": "fitted: the curve's slope, less each request's KV bytes at the datasheet's bandwidth",
               "bytes_per_s": f"assumed: {chip.name}'s datasheet ({chip.source})",
               "kv_bytes_per_s": "assumed: the weights' bandwidth",
               "attention_flops_per_s": "assumed: the peak (the roofline's)",
               "rows_half": ("given: --rows-half" if args.rows_half is not None else
                             "assumed: the roofline's (plain decoding does not show it; fit a grid with --fit-from, or "
                             "give --rows-half)")}
    try:
        terms = step_model.calibrate(points, peak, chip.bytes_per_s, rows_half, sources)
    except step_model.FitError as exc:
        raise ConfigError(f"--calibrate-from {args.calibrate_from}: {exc}") from None
    errors = [terms.step_seconds(p.step, p.batch) / p.seconds - 1 for p in points]
    fit = ", ".join(f"B={p.batch} {100 * e:+.1f} %" for p, e in zip(points, errors))
    checks = {"each point of the curve predicted by the terms calibrated on the others (leave one out)":
              step_model.calibration_held_out(points, peak, chip.bytes_per_s, rows_half, sources)}
    text = fitted_markdown(terms, f"{args.calibrate_from.name}'s plain-decoding curve at context {engine.context}",
                           checks, step_model.TOLERANCE)
    return terms, text + f"\n\nThe curve itself, as the terms reproduce it: {fit}."


def chip_schedule_main(args: argparse.Namespace, device: Any, itemsize: int,
                       terms: step_model.Terms | None = None) -> int:
    """The schedule on a chip: τ(K) from a run folder's largest K, the step at (B, K) from the chip's roofline
    (calibrated on a published plain-decoding curve with --calibrate-from), or from the terms fitted to the engine's
    grid on the chip (`terms`, --fit-from); configs written into that run folder."""

    if args.tau_from.suffix == ".csv":
        raise ConfigError(f"--tau-from {args.tau_from}: --schedule needs per-position acceptance (τ at every K); "
                          "give a run folder with a dflash cell")
    folder = run_folder(args.tau_from)
    summary = summarize_run(RunStore(folder))
    batches = args.batch or DEFAULT_BATCHES
    if 1 not in batches:
        raise ConfigError(f"--batch {','.join(map(str, batches))}: a schedule starts at B = 1; add 1")
    verify = _measured_verify(args, batches) if args.kflat else None
    for src in sources(summary, folder):
        engine = run_engine([src.top], args, itemsize)
        fit_text = ""
        if args.calibrate_from:
            terms, fit_text = calibrated_terms(args, engine)
            print(fit_text + "\n")
        cost = (ksd.measured_verify_cost(verify, engine, device, args.ar_draft_ms) if verify is not None
                else ksd.fitted_cost(engine, terms) if terms is not None
                else ksd.chip_cost(engine, device, args.ar_draft_ms))
        choices = ksd.derive(batches, src.taus, cost, tau_ratio=src.curve.ratio)
        k1 = choices[0].best.k if choices else 0
        bound = next((c.batch for c in choices if k1 and roofline.compute_bound(
            ksd.step_at(engine, c.batch, k1).passes[-1], device)), None)
        draft = (f"an autoregressive draft of {args.ar_draft_ms} ms per token" if args.ar_draft_ms is not None else
                 f"{engine.draft_layers.num_layers} draft layers, "
                 f"{'K + 1' if engine.queries == engine.k + 1 else engine.queries} draft queries")
        fall = ksd.first_fall(choices)
        priced = (f"the verify forward measured on the chip at each (B, K) ({args.kflat.name}, linear in K between "
                  f"the Ks timed), the draft at the roofline of {device.name} ({device.source})" if verify is not None
                  else f"the step at each (B, K) from the terms of {args.fit_from or args.calibrate_from} (above)"
                  if terms is not None
                  else f"Predicted on {device.name} ({device.source}) at the roofline plus "
                       f"{device.overhead_s * 1e3:.3f} ms per forward pass")
        about = (f"## {args.chip}, {args.shape or 'the run' + chr(39) + 's target'}: {src.engine} on {src.workload}"
                 f"\n\n{priced[0].upper() + priced[1:]}; {draft}; context {engine.context}; τ(K) from "
                 f"run {summary.manifest.run_id} ({src.top.method} K = {src.top.k}). K first falls at "
                 f"B = {fall or 'none asked'}; the verify at B = 1's K ({k1}) turns compute-bound at B = "
                 f"{bound or 'none asked'}.")
        text = choices_markdown(choices, about) + (f"\n\n{fit_text}" if fit_text else "")
        name = f"{args.chip}-{args.shape or 'target'}-{src.workload}"
        if args.check_against:
            text += grid_check(src, cost, args.check_against)
            name += f"-checked-on-{args.check_against.name}"
        print(write_schedule(folder, name, choices, text, _matrix_base(summary, src), max(batches)))
    return Exit.OK


def _measured_verify(args: argparse.Namespace, batches: list[int]) -> dict[tuple[int, int], Any]:
    """--kflat with --chip: the verify forward timed on the chip at each (B, K), every B asked among those timed."""

    try:
        points = kflat_batch_points(read_kflat(args.kflat), args.context, args.kflat)
    except ValueError as exc:
        raise ConfigError(f"--kflat {exc}") from None
    timed = sorted({b for b, _ in points})
    untimed = [b for b in batches if b not in timed or (b, 0) not in points]
    if untimed:
        raise ConfigError(f"--batch: {args.kflat} times the plain forward at B = {', '.join(map(str, timed)) or 'none'}"
                          f", not at B = {', '.join(map(str, untimed))}; give --batch among those, or time them "
                          "with study kflat --batch")
    return points
