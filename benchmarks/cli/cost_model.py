"""`cost-model`: DFlash's predicted speedup against K from a run's per-position acceptance and step times, beside
the measured one; or, with --chip, what an engine at the roofline of that chip gives at the τ of a run or a published
table (benchmarks/analysis/cost_model_compute.py)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.analysis import cost_model_compute as cm
from benchmarks.analysis import per_row
from benchmarks.analysis.cost_model_compute import Engine, read_kflat
from benchmarks.analysis.summary import summarize_run
from benchmarks.cli.k_schedule import (
    OUT_FOLDER,
    calibrated_terms,
    chip_schedule_main,
    published_points,
    run_engine,
    schedule_main,
    tree_schedule_main,
)
from benchmarks.cli.report import run_folder
from benchmarks.cli.run import left_out_status
from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core.exit_codes import BadInput, Exit
from benchmarks.core.guarded import file_problem, read_csv_text, read_json_file
from benchmarks.core.numbers import Bounded, is_number
from benchmarks.core.paths import ROOT
from benchmarks.core.shapes import HF_SHAPES, SHAPES, released_draft
from benchmarks.hardware import measure, step_model
from benchmarks.hardware.chips import CHIPS, chip_for
from benchmarks.hardware.roofline import chip_device
from benchmarks.records.store import RunStore
from benchmarks.report.cost_model_render import (
    batch_markdown,
    chip_markdown,
    cost_model_markdown,
    fitted_batch_markdown,
    fitted_markdown,
    range_markdown,
)

# --schedule writes into the run folder it reads (RUN_DIR, or --tau-from's with --chip), checked as a run, its
# outputs by the writer before any is written; without --schedule it prints only (benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS = tuple(f"{OUT_FOLDER}/*/{name}" for name in ("schedule.md", "vllm.json", "trtllm.json", "sglang.json",
                                                      "matrix.yaml"))


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("run_dir", type=Path, nargs="?", help="a run folder (without --chip; default: the latest run)")
    ap.add_argument("--kflat", type=Path,
                    help="a kflat.csv (python -m benchmarks study kflat): the shape of t_verify(K) at the Ks not run; "
                         "with --chip --schedule, one of `study kflat --batch` on that chip: the verify timed at each "
                         "(B, K) prices the steps (the draft at the roofline)")
    ap.add_argument("--chip", choices=sorted(CHIPS), help="predict for this chip (benchmarks/hardware/chips.py)")
    ap.add_argument("--tau-from", type=Path,
                    help="--chip: the τ per dataset, from a published table (results/reference/*.csv) or a run folder")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="--chip: the target's shape (default: the source's)")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), help="--chip: weights' dtype (default bfloat16)")
    ap.add_argument("--context", type=Bounded(int, 1, MAX_CONTEXT),
                    help=f"--chip: context length of a step (its KV rows; default {CHIP_DEFAULTS['context']})")
    ap.add_argument("--k", type=Bounded(int, 1, 1024),
                    help=f"--chip: K where the source does not say it (default {CHIP_DEFAULTS['k']})")
    ap.add_argument("--block-size", type=Bounded(int, 1, 1024),
                    help="--chip: the draft's block (its queries) where the source does not "
                         f"say it (default {CHIP_DEFAULTS['block_size']})")
    ap.add_argument("--overhead-ms", type=Bounded(float, 0, 1e9),
                    help="--chip: time added to every forward pass beyond bytes and FLOPs (default 0: at the roofline)")
    ap.add_argument("--batch", type=Bounded(int, 1, 1 << 20, many=True),
                    help="--chip: batch sizes B to predict at, e.g. 1,2,4,...,64")
    ap.add_argument("--schedule", action="store_true",
                    help="the best K at each B (K = 0 allowed) with its margin, and the schedule as vLLM's, "
                         "TensorRT-LLM's, SGLang's and this harness's config, written into the run folder "
                         "(docs/k-schedule.md)")
    ap.add_argument("--tree", action="store_true",
                    help="--schedule: a draft tree's node budget at each B (budget 0 allowed: no tree) from the run's "
                         "largest-budget ddtree cell, its verify priced by its B × (budget + 1) rows "
                         "(docs/k-schedule.md)")
    ap.add_argument("--calibrate-from", type=Path,
                    help="fit the per-pass overhead and the fraction of peak FLOP/s to a plain-decoding curve: a run "
                         "folder's AR baselines at several B (this CPU without --chip), or a CSV of batch_size, "
                         "tok_per_s_total (with --chip); then price every step with them")
    ap.add_argument("--fit-from", type=Path,
                    help="--chip: a device grid (`study device-grid`'s folder or its grid.csv, the engine's own steps "
                         "on that chip): fit the step's named terms to it, print them with their held-out errors, "
                         "and price the steps with them (at --batch, or --schedule)")
    ap.add_argument("--rows-half", type=Bounded(float, 0.001, 1e9),
                    help="--chip --calibrate-from: the rows at which a matmul reaches half the peak FLOP/s (a plain-"
                         "decoding curve cannot show it; default 0, the roofline's)")
    ap.add_argument("--ar-draft-ms", type=Bounded(float, 0, 1e9),
                    help="--chip: an autoregressive drafter (EAGLE-3): its measured draft time per token and step, "
                         "K of them per step in place of the block draft pass")
    ap.add_argument("--check-against", type=Path,
                    help="--schedule: check the prediction against this run folder's measured K × B grid (a "
                         "replicate): in place of the run's own, or with --chip, the grid of --tau-from's engine")
    ap.add_argument("--cost-ks", type=Bounded(int, 1, 1024, many=True),
                    help="RUN_DIR --schedule: take the step cost at (B, K) from these Ks' measured step times only "
                         "(linear in between), so that the other Ks of the run are a held-out check")


CHIP_DEFAULTS: dict[str, Any] = {"dtype": "bfloat16", "context": 256, "k": 15, "block_size": 16, "overhead_ms": 0.0}
CHIP_ONLY = ("overhead_ms", "batch", "k", "context", "dtype", "block_size", "ar_draft_ms", "rows_half")


def _reference_engine(frame: Any, args: argparse.Namespace, itemsize: int) -> Any:
    """The published runs' target (by its HF id, or --shape) with the released drafts' layout (one layer of the
    target's widths per tap), at the table's K and block, or --k and --block-size where it gives none."""
    import pandas as pd  # lazy: pandas

    target = frame["target"].iloc[0]
    if not args.shape and target not in HF_SHAPES:
        raise ConfigError(f"{args.tau_from}: no named shape for target {target!r}; give --shape")
    shape = SHAPES[args.shape or HF_SHAPES[target]]
    k, block = frame["k"].iloc[0], frame["block_size"].iloc[0]
    dcfg = released_draft(shape, args.block_size if pd.isna(block) else int(block))
    return Engine(shape, dcfg.layers, len(dcfg.target_layer_ids), args.k if pd.isna(k) else int(k), dcfg.block_size,
                  args.context, itemsize)


def chip_main(args: argparse.Namespace) -> int:
    if args.tau_from is None:
        raise ConfigError("--chip needs --tau-from: a published table (results/reference/*.csv) or a run folder")
    itemsize = 2 if args.dtype == "bfloat16" else 4
    device = chip_device(CHIPS[args.chip], args.dtype, args.overhead_ms / 1e3)
    terms = None
    if args.fit_from:
        terms, text = fitted_terms(args, itemsize)
        print(text + "\n")
    if args.schedule and args.tree:
        return tree_schedule_main(args, device, itemsize, terms)
    if args.schedule:
        return chip_schedule_main(args, device, itemsize, terms)
    if args.tau_from.suffix == ".csv":
        from benchmarks.data.reference import ReferenceDataError, present, read_results_table  # lazy: imports pandas

        try:
            frame = read_results_table(args.tau_from)
        except ReferenceDataError as err:
            raise ConfigError(f"--tau-from {err} (the schema of results/reference/*.csv)") from None
        frame = frame[frame["method"] == "dflash"]
        if frame.empty:
            raise ConfigError(f"--tau-from {args.tau_from}: no dflash row to take τ from")
        pairs = list(dict.fromkeys(zip(frame["target"], frame["temperature"])))
        if len(pairs) > 1:
            raise ConfigError(f"--tau-from {args.tau_from}: its dflash rows mix {len(pairs)} (target, temperature) "
                              f"pairs ({'; '.join(f'{t} at T = {temp:g}' for t, temp in pairs[:6])}"
                              f"{f'; and {len(pairs) - 6} more' if len(pairs) > 6 else ''}), and one τ per "
                              f"dataset prices one target at one temperature; give a table of one pair")
        engine, taus = _reference_engine(frame, args, itemsize), cm.reference_taus(frame)
        about = [frame[c].iloc[0] for c in ("hardware", "harness", "source")]
        source = f"{args.tau_from.name} ({', '.join(str(v) for v in about if present(v))})"
    else:
        summary = summarize_run(RunStore(run_folder(args.tau_from)))
        engine = run_engine(list(summary.manifest.cells.values()), args, itemsize)
        taus = cm.run_taus(summary.rows)
        source = f"run {summary.manifest.run_id or args.tau_from.name}"
    if args.calibrate_from:
        terms, text = calibrated_terms(args, engine)
        print(text + "\n")
        if args.rows_half is None:  # a plain curve cannot show the per-row term: a range over the measured ones
            print(calibrated_range(args, engine, taus, source))
            return Exit.OK
    if terms is not None:
        print(fitted_batch_markdown(engine, terms, taus, source, args.batch or [1]))
    elif args.batch:
        print(batch_markdown(engine, device, taus, source, args.batch))
    else:
        print(chip_markdown(engine, device, taus, source))
    return Exit.OK


def calibrated_range(args: argparse.Namespace, engine: Engine, taus: list[cm.Tau], source: str) -> str:
    """The speculative curve of --calibrate-from without --rows-half: the published curve calibrated once per per-row
    term measured on the devices we hold (benchmarks/analysis/per_row.py), at every --batch, as the range they span."""
    chip = CHIPS[args.chip]
    peak = chip.bf16_flops_per_s if engine.itemsize == 2 else chip.fp32_flops_per_s
    steps = per_row.curve_range(engine, published_points(args.calibrate_from), peak, chip.bytes_per_s,
                                per_row.measured(ROOT), args.batch or [1])
    return range_markdown(engine, steps, taus, source)


def fitted_terms(args: argparse.Namespace, itemsize: int) -> tuple[step_model.Terms, str]:
    """The step terms fitted to the device grid of --fit-from (its shape: --shape, else the grid's own), with the
    held-out checks: each point left out, and where the grid has Ks between, those predicted from K = 0 and the
    largest K."""
    path = args.fit_from / "grid.csv" if args.fit_from.is_dir() else args.fit_from
    unreadable = file_problem(path)
    if unreadable:
        raise ConfigError(f"--fit-from {path} {unreadable}; give a device grid (`study device-grid`'s folder or its "
                          f"grid.csv)")
    about = path.with_name("grid.json")
    try:
        recorded = read_json_file(about) if about.is_file() else {}
    except ValueError as exc:
        raise ConfigError(f"--fit-from {exc}; give --shape") from None
    wrong_platform = platform_problem(recorded, args.chip)
    if wrong_platform:
        raise ConfigError(f"--fit-from {path}: {wrong_platform}")
    shape_name = args.shape or recorded.get("shape")
    if args.chip and recorded.get("dtype") not in (None, args.dtype):
        raise ConfigError(f"--fit-from {path}: the grid was timed in {recorded['dtype']}, the steps are priced in "
                          f"{args.dtype}; give --dtype {recorded['dtype']}")
    if shape_name not in SHAPES:
        raise ConfigError(f"--fit-from {path}: the grid's shape is {shape_name or 'not recorded'}; give --shape (one "
                          f"of {', '.join(sorted(SHAPES))})")
    try:
        rows = read_csv_text(path, numeric=("batch", "context", "k", "write_behind")).to_dict("records")
    except ValueError as exc:
        raise ConfigError(f"--fit-from {exc}") from None
    missing = {"batch", "context", "k", "status", "step_ms"} - set(rows[0] if rows else {})
    if missing:
        raise ConfigError(f"--fit-from {path}: no {', '.join(sorted(missing))} column; give the grid.csv of "
                          f"`python -m benchmarks study device-grid`")
    shape = SHAPES[shape_name]
    dcfg = released_draft(shape, args.block_size)
    engine = Engine(shape, dcfg.layers, len(dcfg.target_layer_ids), args.k, dcfg.block_size, args.context, itemsize)
    try:
        points = cm.grid_points(rows, engine)
    except BadInput as exc:
        raise ConfigError([f"--fit-from {path}: {line}" for line in exc.problems]) from None
    chip = bool(args.chip)  # a chip's datasheet bandwidth is a ceiling; a CPU's measured stream is not (its caches)
    # a chip's grid that timed its matmuls by row count holds its per-row term (of the same datasheet peak)
    rates = recorded.get("matmul") if chip else None
    measured = float(rates["rows_half"]) if isinstance(rates, dict) and is_number(rates.get("rows_half")) else None
    said = {name: "fitted" for name in step_model.TERMS} | (
        {"rows_half": "measured: the grid's matmul rates by row count (grid.json)"} if measured else {})
    if args.chip:
        spec = CHIPS[args.chip]
        peak, nominal = (spec.bf16_flops_per_s if itemsize == 2 else spec.fp32_flops_per_s), spec.bytes_per_s
    else:  # a grid of this machine's CPU (float32)
        peak, nominal = measure.matmul_flops_per_s("float32"), measure.read_bytes_per_s()
    source = f"{len(points)} steps of {path} ({shape_name}, {'bfloat16' if itemsize == 2 else 'float32'})"
    try:
        terms = step_model.fit(points, peak, nominal, said, ceiling=chip, rows_half=measured)
    except step_model.FitError as exc:
        raise ConfigError(f"--fit-from {path}: {exc}") from None
    left_out = step_model.held_out(points, peak, nominal, ceiling=chip, rows_half=measured)
    checks = {"each point predicted by the terms fitted to the others": left_out}
    ks = sorted({int(r["k"]) for r in rows if r["status"] == "ok"})
    if len(ks) > 2:
        ends = (ks[0], ks[-1])
        checks[f"the Ks between K = {ends[0]} and {ends[1]}, from the terms fitted to those two"] = step_model.held_out(
            points, peak, nominal, fitted_on=lambda p: int(p.label.rsplit("K=", 1)[1]) in ends, ceiling=chip,
            rows_half=measured)
    return terms, fitted_markdown(terms, source, checks, step_model.TOLERANCE)


def platform_problem(recorded: dict[str, Any], chip: str | None) -> str | None:
    """Why a device grid whose grid.json records `recorded` cannot price `chip` (None: this machine's CPU): timed on
    another platform, or on another chip the table knows; None when it can, or when the grid does not say."""
    platform, device = recorded.get("platform"), recorded.get("device") or "a device not recorded"
    if not isinstance(platform, str) or not platform:
        return None
    if chip is None:
        if platform == "cpu":
            return None
        named = chip_for(platform, str(device))
        give = next((f"--chip {k}" for k, c in CHIPS.items() if c is named), "--chip with the chip it was timed on")
        return f"the grid was timed on {platform} ({device}); without --chip it is fitted as this CPU's: give {give}"
    spec = CHIPS[chip]
    kind = "tpu" if spec.name.startswith("TPU") else "gpu"
    if platform != kind:
        return (f"the grid was timed on {platform} ({device}), not a {kind.upper()}; --chip {chip} prices a "
                f"{spec.name}")
    timed_on = chip_for(platform, str(device))
    if timed_on is not None and timed_on is not spec:
        return f"the grid was timed on a {timed_on.name} ({device}); --chip {chip} prices a {spec.name}"
    return None


MAX_CONTEXT = 1 << 24  # positions: beyond any model the harness runs


def option_problems(args: argparse.Namespace) -> list[str]:
    """The options that cannot mean what they say together, one line each: options of --chip given without it (one
    line naming them all), and each pair the command would not read as written (each number's own range is its
    declared `Bounded` type, checked as it is parsed)."""
    problems = []
    if not args.chip and args.tau_from is not None:
        problems.append("--tau-from is read only with --chip (a prediction for that chip); give --chip, or drop "
                        "--tau-from to model the run given as RUN_DIR")
    given = [f"--{name.replace('_', '-')}" for name in CHIP_ONLY if getattr(args, name) is not None]
    if not args.chip and given:
        problems.append(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} read only with --chip (a prediction "
                        f"for that chip); give --chip X --tau-from RUN, or drop {' and '.join(given)} to model the "
                        "run given as RUN_DIR")
    if args.shape is not None and not (args.chip or args.fit_from):
        problems.append("--shape is read only with --chip or --fit-from (the shape of a prediction or of a grid): "
                        "give --chip X --tau-from RUN, or drop --shape to model the run given as RUN_DIR")
    if args.rows_half is not None and args.calibrate_from is None:
        problems.append("--rows-half is the FLOP efficiency a calibration on a plain-decoding curve assumes: add "
                        "--chip X --calibrate-from curve.csv, or drop --rows-half")
    alone = [f"--{n.replace('_', '-')}" for n in ("cost_ks", "check_against") if getattr(args, n) is not None]
    if alone and not args.schedule:
        problems.append(f"{' and '.join(alone)} {'go' if len(alone) > 1 else 'goes'} with --schedule (the K per batch "
                        f"size they price or check): add --schedule, or drop {' and '.join(alone)}")
    if args.chip and args.kflat is not None and not args.schedule:
        problems.append("--kflat with --chip prices the steps of --schedule (the verify timed on the chip at each B "
                        "and K): add --schedule, or drop --kflat")
    if not args.chip and args.kflat is not None and (args.schedule or args.calibrate_from or args.fit_from):
        problems.append("--kflat shapes the verify of a run's cost table; a run's schedule, a calibration and a fit "
                        "price the steps themselves and would ignore it: drop --kflat, or add --chip to price the "
                        "verify timed on that chip")
    priced = [f"--{n.replace('_', '-')}" for n in ("kflat", "calibrate_from", "fit_from")
              if getattr(args, n) is not None]
    if args.chip and len(priced) > 1:
        problems.append(f"{' and '.join(priced)} are prices of one step (timed, fitted to a plain-decoding curve, or "
                        "fitted to the engine's grid): give one of them")
    if args.chip and args.ar_draft_ms is not None and not args.schedule:
        problems.append("--ar-draft-ms prices the draft of --schedule's steps: add --schedule, or drop --ar-draft-ms")
    if args.ar_draft_ms is not None and (args.fit_from or args.calibrate_from):
        problems.append("--ar-draft-ms prices a drafter beside the roofline's or --kflat's verify; fitted terms price "
                        "the engine's own block draft: drop --ar-draft-ms, or drop --fit-from/--calibrate-from")
    if args.chip and args.run_dir is not None:
        problems.append(f"{args.run_dir} is not read with --chip (its τ comes from --tau-from): give --tau-from "
                        f"{args.run_dir}, or drop --chip to model that run")
    if args.chip and args.cost_ks is not None:
        problems.append("--cost-ks picks a run's measured step times; with --chip the steps are priced on the chip: "
                        "drop --cost-ks, or drop --chip to model the run given as RUN_DIR")
    if args.tree and not args.schedule:
        problems.append("--tree picks the node budget of --schedule: add --schedule, or drop --tree")
    untree = [f"--{n.replace('_', '-')}" for n in ("kflat", "calibrate_from", "ar_draft_ms", "cost_ks", "check_against")
              if getattr(args, n) is not None]
    if args.tree and untree:
        problems.append(f"{' and '.join(untree)} price or check a K schedule's steps, not a tree's: drop "
                        f"{' and '.join(untree)}, or drop --tree (a tree's steps come from the run's own budgets, "
                        "or --chip with its roofline or --fit-from)")
    return problems


def chip_options(args: argparse.Namespace) -> argparse.Namespace:
    """args with --chip's defaults where its options are not given."""
    return argparse.Namespace(**{**vars(args), **{k: v for k, v in CHIP_DEFAULTS.items() if getattr(args, k) is None}})


def main(args: argparse.Namespace) -> int:
    problems = option_problems(args)
    if problems:
        raise ConfigError(problems)
    if args.chip:
        return chip_main(chip_options(args))
    if args.fit_from:  # this machine's CPU: its measured read stream and matmul peak are the nominal figures
        _, text = fitted_terms(chip_options(args), 4)
        print(text)
        return Exit.OK
    if args.schedule and args.tree:
        return tree_schedule_main(args)
    if args.schedule or args.calibrate_from:
        return schedule_main(args)

    try:
        kflat = read_kflat(args.kflat) if args.kflat else None
    except ValueError as exc:
        raise ConfigError(f"--kflat {exc}") from None

    folder = run_folder(args.run_dir)
    summary = summarize_run(RunStore(folder))
    print(cost_model_markdown(summary.rows, summary.cost_groups, kflat))
    return left_out_status(folder, summary.left_out)
