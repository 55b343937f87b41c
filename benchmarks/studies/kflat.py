"""K-flat: the target's verification-forward time for K+1 tokens against K, at several context lengths (JAX engine).

    python -m benchmarks study kflat --random-weights --shape qwen3-4b          # a published shape, no download
    python -m benchmarks study kflat --model PATH                                # a real checkpoint (HF folder)
    python -m benchmarks study kflat --quick                                     # the tiny CPU shape in seconds
    python -m benchmarks study kflat --quick --batch 1,2                         # a batched verify per B

Each point is the median of synchronised jitted forwards (`time_forwards`) with a distribution-free 95 % CI, printed
beside the roofline's prediction (benchmarks.hardware.roofline: the chip table, or this CPU's measured matmuls) and both
normalised to K=0. A median below the memory-bandwidth floor (everything the forward reads,
benchmarks.hardware.step_cost) is a timing error: flagged IMPOSSIBLE in the output and the CSV and drawn apart in the
figure, its ratio still printed; where a CPU cache holds the whole working set the floor is not applied. Why vLLM is not
measured here: docs/engine-findings.md. Outputs in OUT (default results/kflat/<shape>-<platform>/): kflat.csv,
kflat.png, kflat.json (settings). With --batch B[,B...]: per B, one forward of B requests, each K+1 tokens at its own
cache (the batch-1 forward under jax.vmap, as the engine's batch path runs it), beside step_cost at that batch;
kflat.csv then carries a batch column (BATCH_CSV_COLUMNS) and each B is normalised to its own K=0; no figure.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.config.matrix_parse import ConfigError
from benchmarks.core import metrics
from benchmarks.core.atomic import atomic_write_text, check_outputs
from benchmarks.core.exit_codes import BadInput
from benchmarks.core.numbers import Bounded
from benchmarks.core.paths import ROOT
from benchmarks.core.shapes import SHAPE_ALIASES, SHAPES, tap_ids_for
from benchmarks.hardware import detect, provenance, roofline, step_cost

DEFAULT_KS = (0, 1, 3, 7, 15, 31, 63, 127)
DEFAULT_CONTEXTS = (256, 2048)
QUICK_KS = (0, 1, 7)
QUICK_CONTEXTS = (64,)
OUTPUTS = ("kflat.csv", "kflat.json", "kflat.png")  # what it writes into its output folder
OUTPUT_ARGS = ("out",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
CSV_COLUMNS = ("engine", "k", "context_len", "median_ms", "ci_low", "ci_high", "repeats", "normalised_to_k0",
               "predicted_ms", "predicted_normalised", "normalised_error", "floor_ms", "below_floor", "verdict")
BATCH_CSV_COLUMNS = CSV_COLUMNS[:1] + ("batch",) + CSV_COLUMNS[1:]


@dataclass(frozen=True)
class Point:
    """Timings of one (K, context length): milliseconds per verify forward."""

    k: int
    context_len: int
    samples_ms: tuple[float, ...]
    batch: int = 1


@dataclass(frozen=True)
class Floor:
    """What bounds a verify forward from below: everything it reads (step_cost.verify_step) over the bandwidth."""

    shape: Any
    itemsize: int
    bandwidth_bytes_per_s: float | None
    applies: bool
    note: str  # where the bandwidth comes from, or why the floor does not bind here
    batch: int = 1  # requests per forward

    def bound_ms(self, k: int, context_len: int) -> float:
        """The forward's bytes / bandwidth; NaN when the bandwidth is unknown."""
        if self.bandwidth_bytes_per_s is None:
            return math.nan
        return 1000.0 * roofline.floor_seconds(step_cost.verify_step(self.shape, k, context_len, self.itemsize,
                                                                       self.batch),
                                               self.bandwidth_bytes_per_s)

    def ms(self, k: int, context_len: int) -> float:
        """The floor that verdicts use: NaN where it does not bind."""
        return self.bound_ms(k, context_len) if self.applies else math.nan


def predicted_ms(shape: Any, ks: Sequence[int], contexts: Sequence[int], itemsize: int,
                 device: roofline.Device | None, batch: int = 1) -> dict[tuple[int, int], float]:
    """The roofline's time of each (K, context) verify forward of `batch` requests; NaN without a device."""
    return {(k, c): 1000.0 * roofline.step_seconds(step_cost.verify_step(shape, k, c, itemsize, batch), device)
            if device else math.nan for k in ks for c in contexts}


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and a distribution-free CI from order statistics (`metrics.quantile_interval`, binomial(n, 1/2)
    ranks); min/max when n < 6, too few for a bound of that confidence."""
    if not len(samples):
        return math.nan, math.nan, math.nan
    med, low, high = metrics.quantile_interval(samples, 0.5, confidence)
    return med, low if math.isfinite(low) else float(min(samples)), high if math.isfinite(high) else float(max(samples))


def rows_from_points(points: Sequence[Point], floor: Floor, predicted: dict[tuple[int, int], float] | None = None,
                     engine: str = "jax", batch: int | None = None) -> list[dict[str, Any]]:
    """CSV rows: median and CI, measured and predicted time normalised to K=0 (a point below its floor keeps its
    ratio: the verdict flags it), the floor and a verdict; a "batch" column where `batch` is given."""
    rows: list[dict[str, Any]] = []
    for p in points:
        med, lo, hi = median_ci(p.samples_ms)
        floor_ms = floor.ms(p.k, p.context_len)
        below = metrics.below_floor(med, floor_ms)
        verdict = "IMPOSSIBLE" if below else ("ok" if floor.applies else f"ok (no floor: {floor.note})")
        rows.append({"engine": engine, "k": p.k, "context_len": p.context_len, "median_ms": med, "ci_low": lo,
                     "ci_high": hi, "repeats": len(p.samples_ms), "normalised_to_k0": math.nan,
                     "predicted_ms": (predicted or {}).get((p.k, p.context_len), math.nan),
                     "predicted_normalised": math.nan, "normalised_error": math.nan, "floor_ms": floor_ms,
                     "below_floor": below, "verdict": verdict} | ({} if batch is None else {"batch": batch}))
    base = {r["context_len"]: r for r in rows if r["k"] == 0}
    for r in rows:
        b = base.get(r["context_len"])
        if b is not None:
            r["normalised_to_k0"] = r["median_ms"] / b["median_ms"]
            r["predicted_normalised"] = r["predicted_ms"] / b["predicted_ms"]
            r["normalised_error"] = r["predicted_normalised"] / r["normalised_to_k0"] - 1.0
    return rows


def impossible_lines(rows: Sequence[dict[str, Any]], memory: str = "HBM") -> list[str]:
    return [f"IMPOSSIBLE: K={r['k']} context={r['context_len']}: {r['median_ms']:.4f} ms < {r['floor_ms']:.4f} ms, "
            f"below the {memory} floor — timing error, not a result" for r in rows if r["below_floor"]]


# ---------------------------------------------------------------------------------------------------------------
# Measuring (JAX)

def time_forwards(params: Any, cfg: Any, ks: Sequence[int], context_len: int, repeats: int, warmup: int,
                  dtype: Any, tap_ids: tuple[int, ...], seed: int = 0,
                  compile_log: dict[int, float] | None = None, batch: int = 1) -> dict[int, list[float]]:
    """Milliseconds of `repeats` synchronised verify forwards of K+1 tokens at positions context_len.., per K.

    One jitted `model.forward` with the DFlash taps, on a KV cache of exactly context_len+K+1 rows, so attention
    reads the context and the block, as a paged kernel would; every timed call ends with `jax.block_until_ready` on
    all its outputs (logits, taps, cache). Every K is compiled and warmed up first; the timed calls then go round
    the Ks in turn, so that a slow drift of the machine (other load, clocks) falls on every K alike instead of on
    whichever K ran last. compile_log gets each K's first call (its compile) in seconds. batch > 1: B requests per
    forward, each with its own tokens and cache (`batched_forward`), all at context_len.
    """
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import batch as B  # lazy: imports jax
    from benchmarks.engines.jax import model as M  # lazy: imports jax

    rng = np.random.default_rng(seed)
    lead = () if batch == 1 else (batch,)
    start = jnp.full(lead, context_len, jnp.int32)
    tokens = {k: jnp.asarray(rng.integers(0, cfg.vocab_size, (*lead, k + 1)), jnp.int32) for k in ks}
    caches = {k: M.init_cache(cfg, context_len + k + 1, dtype) if batch == 1
              else B.batch_cache(cfg, context_len + k + 1, dtype, batch) for k in ks}
    step = M.forward if batch == 1 else batched_forward

    def call(k: int) -> None:
        out = step(params, tokens[k], start, caches[k], cfg=cfg, tap_ids=tap_ids)
        caches[k] = jax.block_until_ready(out)[2]  # the cache is donated: keep the returned one

    for k in ks:
        t0 = time.perf_counter()
        call(k)  # the first call compiles
        if compile_log is not None:
            compile_log[k] = time.perf_counter() - t0
        for _ in range(max(warmup, 1) - 1):
            call(k)
    samples: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(repeats):
        for k in ks:
            t0 = time.perf_counter()
            call(k)
            samples[k].append(1000.0 * (time.perf_counter() - t0))
    return samples


@functools.cache
def _batched_jit() -> Any:
    import jax  # lazy: jax

    from benchmarks.engines.jax import model as M  # lazy: imports jax

    def run(params, tokens, start, cache, cfg, tap_ids):
        return jax.vmap(lambda t, s, c: M.forward(params, t, s, c, cfg=cfg, tap_ids=tap_ids),
                        in_axes=(0, 0, M.CACHE_AXIS), out_axes=(0, 0, M.CACHE_AXIS))(tokens, start, cache)

    return jax.jit(run, static_argnames=("cfg", "tap_ids"), donate_argnames=("cache",))


def batched_forward(params: Any, tokens: Any, start: Any, cache: Any, *, cfg: Any, tap_ids: tuple[int, ...]) -> Any:
    """The batch-1 `model.forward` under jax.vmap over tokens [B, T], starts [B] and a batch's caches (batch_cache's;
    jitted once, the caches donated), as the engine's batch path (engines/jax/batch.py) verifies."""
    return _batched_jit()(params, tokens, start, cache, cfg=cfg, tap_ids=tap_ids)


def measure(params: Any, cfg: Any, ks: Sequence[int], contexts: Sequence[int], repeats: int, warmup: int,
            dtype: Any, tap_ids: tuple[int, ...], batch: int = 1) -> list[Point]:
    points = []
    label = "" if batch == 1 else f"B={batch:3d} "
    for c in contexts:
        samples = (time_forwards(params, cfg, ks, c, repeats, warmup, dtype, tap_ids) if batch == 1
                   else time_forwards(params, cfg, ks, c, repeats, warmup, dtype, tap_ids, batch=batch))
        for k in ks:
            points.append(Point(k, c, tuple(samples[k]), batch))
            print(f"  {label}K={k:4d} context={c:6d}: median {np.median(samples[k]):.3f} ms over {len(samples[k])}",
                  flush=True)
    return points


# ---------------------------------------------------------------------------------------------------------------
# Outputs

def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """kflat.csv: CSV_COLUMNS, or BATCH_CSV_COLUMNS where the rows carry a batch."""
    import pandas as pd  # lazy: pandas

    columns = BATCH_CSV_COLUMNS if rows and "batch" in rows[0] else CSV_COLUMNS
    atomic_write_text(path, pd.DataFrame(list(rows), columns=list(columns)).to_csv(index=False, float_format="%.6g"))


def plot(rows: Sequence[dict[str, Any]], floor: Floor, path: Path, title: str) -> None:
    """Two panels: absolute ms vs K with the roofline's prediction (dotted) and the bandwidth floor (dashed where it
    binds, dash-dotted where it does not), and the same normalised to K=0. Points below their floor are red crosses
    outside the curves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib
    from matplotlib.figure import Figure  # lazy: matplotlib

    from benchmarks.figures.figure_style import save_figure  # lazy: imports matplotlib, pandas

    fig = Figure(figsize=(11, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax_abs, ax_norm = fig.subplots(1, 2)
    style, note = ("--", "") if floor.applies else ("-.", " (not binding)")
    impossible_labelled = False
    for i, c in enumerate(sorted({r["context_len"] for r in rows})):
        color = f"C{i}"
        rs = sorted((r for r in rows if r["context_len"] == c), key=lambda r: r["k"])
        x = [r["k"] + 1 for r in rs]
        ok = [r for r in rs if not r["below_floor"]]
        if ok:
            med = np.array([r["median_ms"] for r in ok])
            err = np.array([[r["median_ms"] - r["ci_low"] for r in ok], [r["ci_high"] - r["median_ms"] for r in ok]])
            ax_abs.errorbar([r["k"] + 1 for r in ok], med, yerr=err, marker="o", color=color, capsize=3,
                            label=f"context {c}")
            ax_norm.plot([r["k"] + 1 for r in ok], [r["normalised_to_k0"] for r in ok], marker="o", color=color,
                         label=f"context {c}")
        if not any(math.isnan(r["predicted_ms"]) for r in rs):
            ax_abs.plot(x, [r["predicted_ms"] for r in rs], ":", color=color, label=f"predicted, context {c}")
            ax_norm.plot(x, [r["predicted_normalised"] for r in rs], ":", color=color, label=f"predicted, context {c}")
        bound = [floor.bound_ms(r["k"], c) for r in rs]
        if not any(math.isnan(b) for b in bound):
            ax_abs.plot(x, bound, style, color=color, linewidth=1, label=f"bandwidth floor, context {c}{note}")
        bad = [r for r in rs if r["below_floor"]]
        if bad:
            label = None if impossible_labelled else "below the floor: timing error, not a result"
            for ax, key in ((ax_abs, "median_ms"), (ax_norm, "normalised_to_k0")):
                ax.scatter([r["k"] + 1 for r in bad], [r[key] for r in bad], marker="x", color="red", s=60,
                           zorder=3, label=label)
            impossible_labelled = True
    ticks = sorted({r["k"] + 1 for r in rows})
    for ax in (ax_abs, ax_norm):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("tokens verified per forward, K+1 (log scale)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax_abs.set_ylabel("verify forward time (ms), median with 95 % CI")
    ax_norm.set_ylabel("time / time at K=0 (×)")
    ax_abs.set_title("verify forward time")
    ax_norm.set_title("normalised to K=0 (1.0 = flat)")
    fig.suptitle(title if floor.applies else f"{title}\nfloor not binding: {floor.note}")
    save_figure(fig, path)


def row_line(r: dict[str, Any]) -> str:
    """A point's median, CI and ratio beside the prediction's, and the verdict (its batch first where it has one)."""
    return ((f"B={r['batch']:3d} " if "batch" in r else "")
            + f"K={r['k']:4d} context={r['context_len']:6d} median {r['median_ms']:.4f} ms "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] predicted {r['predicted_ms']:.4f} ms | "
            f"x{r['normalised_to_k0']:.3f} of K=0, predicted x{r['predicted_normalised']:.3f} "
            f"({100 * r['normalised_error']:+.1f} %)  {r['verdict']}")


# ---------------------------------------------------------------------------------------------------------------
# CLI

def add_cli_args(ap: argparse.ArgumentParser) -> None:
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", type=Path, help="an HF checkpoint folder (Qwen3 / Llama-3 target)")
    src.add_argument("--random-weights", action="store_true",
                     help="random weights of --shape, no download (the default without --model)")
    ap.add_argument("--shape", default="qwen3-tiny", choices=sorted(SHAPES) + sorted(SHAPE_ALIASES),
                    help="named shape for --random-weights (default qwen3-tiny)")
    ap.add_argument("--ks", type=Bounded(int, 0, 1024, many=True),
                    help=f"K values (default {','.join(map(str, DEFAULT_KS))})")
    ap.add_argument("--contexts", type=Bounded(int, 0, 1 << 24, many=True),
                    help=f"context lengths (default {','.join(map(str, DEFAULT_CONTEXTS))})")
    ap.add_argument("--repeats", type=Bounded(int, 1, 10_000), help="timed calls per point (default 30)")
    ap.add_argument("--warmup", type=Bounded(int, 0, 10_000),
                    help="untimed calls per point after compiling (default 3)")
    ap.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="auto: bfloat16 on accelerators, float32 on CPU")
    ap.add_argument("--weight-layout", choices=("oi", "io"),
                    help="weights stored [out, in] (HF's) or [in, out] (default: the engine's on this platform)")
    ap.add_argument("--out", type=Path, help="output folder (default results/kflat/<shape>-<platform>/)")
    ap.add_argument("--batch", type=Bounded(int, 1, 4096, many=True),
                    help="batch sizes B: time B requests per forward (vmapped), each B beside step_cost at B")
    ap.add_argument("--quick", action="store_true",
                    help=f"K {QUICK_KS}, context {QUICK_CONTEXTS}, 5 repeats, 1 warm-up (for tests)")


def resolve_args(args: argparse.Namespace) -> argparse.Namespace:
    """The defaults that depend on --quick, and the rule that every K is normalised to K=0."""
    args.shape = SHAPE_ALIASES.get(args.shape, args.shape)
    args.ks = args.ks or (QUICK_KS if args.quick else DEFAULT_KS)
    args.contexts = args.contexts or (QUICK_CONTEXTS if args.quick else DEFAULT_CONTEXTS)
    args.repeats = args.repeats or (5 if args.quick else 30)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    if 0 not in args.ks:
        raise ConfigError("--ks must include 0: every point is normalised to K=0")
    return args


def option_problems(args: argparse.Namespace) -> list[str]:
    """The options the study would fail on late, one line each (checked before anything loads): a --model folder
    without its config.json. Each number's range is its declared `Bounded` type, checked as it is parsed."""
    if args.model is not None and not (args.model / "config.json").is_file():
        return [f"--model {args.model}: not a model folder (no config.json); give an HF checkpoint folder"]
    return []


def main(args: argparse.Namespace) -> int:
    problems = option_problems(args)
    if problems:
        raise BadInput(problems)
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import loader  # lazy: imports jax, safetensors
    from benchmarks.engines.jax import model as M  # lazy: imports jax

    args = resolve_args(args)
    hw = detect.detect()
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}.get(
        args.dtype, jnp.float32 if hw.platform == "cpu" else jnp.bfloat16)
    layout = args.weight_layout or M.platform_layout()
    name = args.model.resolve().name if args.model else args.shape
    out = args.out or ROOT / "results" / "kflat" / f"{name}-{hw.platform}"
    check_outputs(out, OUTPUTS)  # before the weights load
    if args.model:
        cfg, params = loader.load_target(args.model, jnp.dtype(dtype).name, layout)
    else:
        cfg = dataclasses.replace(SHAPES[args.shape], weight_layout=layout)
        params = M.init_random_params(cfg, jax.random.key(0), dtype)
    taps = tap_ids_for(cfg.num_layers)
    itemsize = jnp.dtype(dtype).itemsize
    batches = args.batch or (1,)
    steps = [step_cost.verify_step(cfg, k, c, itemsize, b) for b in batches for k in args.ks for c in args.contexts]
    largest = step_cost.verify_step(cfg, max(args.ks), max(args.contexts), itemsize, max(batches)).bytes()
    applies, why = hw.floor_applies(largest)
    floor = Floor(cfg, itemsize, hw.bandwidth_bytes_per_s, applies, hw.bandwidth_source if applies else why)
    device = hw.predictor(jnp.dtype(dtype).name, cfg.weight_layout, steps, largest)
    print(f"kflat: {name} ({'checkpoint' if args.model else 'random weights'}, {jnp.dtype(dtype).name}, weights "
          f"[{'out, in' if cfg.weight_layout == 'oi' else 'in, out'}]) on {hw.device}; taps {list(taps)}")
    bound = ", ".join(f"{floor.bound_ms(0, c):.4f} ms at K=0, context {c}" for c in args.contexts)
    print(f"kflat: a K=0 forward reads {steps[0].bytes() / 1e6:.1f} MB; bandwidth "
          f"{(hw.bandwidth_bytes_per_s or math.nan) / 1e9:.1f} GB/s ({hw.bandwidth_source}) -> floor {bound}"
          + ("" if applies else f"; NOT APPLIED: {why}"))
    print(f"kflat: predicted for {device.name} ({device.source}; overhead {1e3 * device.overhead_s:.3f} ms per "
          f"forward)" if device else f"kflat: no prediction: {hw.device} is not in the chip table")

    if args.batch:
        rows = [r for b in args.batch for r in rows_from_points(
            measure(params, cfg, args.ks, args.contexts, args.repeats, args.warmup, dtype, taps, b),
            dataclasses.replace(floor, batch=b), predicted_ms(cfg, args.ks, args.contexts, itemsize, device, b),
            batch=b)]
    else:
        points = measure(params, cfg, args.ks, args.contexts, args.repeats, args.warmup, dtype, taps)
        rows = rows_from_points(points, floor, predicted_ms(cfg, args.ks, args.contexts, itemsize, device))
    write_csv(rows, out / "kflat.csv")
    if not args.batch:
        title = f"Verify forward vs K: {name} ({jnp.dtype(dtype).name}) on {hw.device}, JAX"
        plot(rows, floor, out / "kflat.png", title)
    meta = {"model": str(args.model) if args.model else None, "shape": None if args.model else args.shape,
            "platform": hw.platform, "device": hw.device, "dtype": jnp.dtype(dtype).name, "tap_ids": list(taps),
            "weight_layout": cfg.weight_layout,
            "bandwidth_bytes_per_s": hw.bandwidth_bytes_per_s, "bandwidth_source": hw.bandwidth_source,
            "floor_applies": applies, "floor_note": floor.note, "predicted_for": device.name if device else None,
            "prediction_source": device.source if device else None, "repeats": args.repeats, "warmup": args.warmup,
            **({"batch": list(args.batch)} if args.batch else {}),
            "packages": provenance.package_versions(), "git_sha": provenance.git_sha(),
            "code_sha256": provenance.code_sha256()}
    atomic_write_text(out / "kflat.json", json.dumps(meta, indent=2) + "\n")

    for r in rows:
        print(row_line(r))
    for line in impossible_lines(rows, "memory-bandwidth" if hw.platform == "cpu" else "HBM"):
        print(line)
    print(f"kflat: wrote {out / 'kflat.csv'}" + ("" if args.batch else f" and {out / 'kflat.png'}"))
    return 0
