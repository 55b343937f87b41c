"""The JAX engine's own decode step at every batch size, context and K, against the roofline (study device-grid).

    python -m benchmarks study device-grid --shape qwen3-4b --batch 1,4,16,64 --context 256,2048,8192 --ks 0,7,15 \
        --out DIR [--budget-s S] [--profile-above 1.15] [--memory-gb G]
    python -m benchmarks.studies.device_grid ...     the same where the CLI's own imports (yaml, pandas) are missing

Each point runs the loop the engine runs: `decode.ar_steps` / `spec_steps` at B = 1 (the engine's one-request path),
`batch.ar_batch_steps` / `spec_batch_steps` above (its static batch), over caches that hold `context` rows per
request, which every step reads (its span). K = 0 is plain decoding; K > 0 is DFlash with the device study's oracle
weights (`device.oracle`: every draft accepted, so a step commits K + 1 tokens), the released drafts' layout and
block. The caches hold zeros and the weights are random where the oracle leaves them: a step reads and multiplies
the same bytes whatever their values. Per point, medians of `--repeats`:
- the step: a loop of `--steps` steps less a loop with nothing to do, over the steps;
- the engine's step: the same loop dispatched while an earlier one runs (as the engine dispatches its loops during
  the prefill), timed from the end of that one; the host's share is what it adds to the step;
- the roofline's step and its floor (benchmarks.hardware.step_cost: weights once, every request's KV rows, FLOPs at the
  chip's peak);
- the practical roofline's step: per pass max(its bytes at the stream's measured rate, its FLOPs at the matmul rate
  measured at its row count) (benchmarks.hardware.matmul_rate). Before the points, the grid times the device's
  matrix-vector stream (`--stream-gb`), a large matmul and the layer's matmuls at the model's widths over 16 to 1,024
  rows (`--matmul-gb`, `--matmul-rows`), and fits the cost model's per-row term to those rates.
A point whose caches and work space do not fit the device's free memory is named with its bytes and skipped; one the
budget cannot hold is dropped and named. Points above `--profile-above` times their roofline (bytes or FLOPs at
the datasheet's rates) get a jax.profiler trace of one loop, its device ops summed by kind per step
(`profile_ops`). OUT gets grid.json (rewritten after every point), grid.csv, the matmul rates in matmul.csv and the
traces in profile.tar.gz. What the chip gave: docs/tpu.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.metadata
import math
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The harness's modules below import jax, numpy and scipy at most: no yaml, no pandas
from benchmarks.core.atomic import (
    atomic_write_bytes,
    atomic_write_csv,
    atomic_write_json,
    check_outputs,
    output_folder,
)
from benchmarks.core.environment import check as environment_problems
from benchmarks.core.exit_codes import BadInput, Exit, run_alone
from benchmarks.core.numbers import Bounded, as_float
from benchmarks.core.paths import ROOT
from benchmarks.hardware import step_cost
from benchmarks.hardware.matmul_rate import ROWS
from benchmarks.hardware.measure import available_memory_bytes
from benchmarks.hardware.step_cost import kv_bytes_per_token
from benchmarks.studies.device import draft_config, oracle, resolve_shape

# What it writes into --out (checked before any work)
OUTPUTS = ("grid.json", "grid.csv", "trees.csv", "matmul.csv", "profile.tar.gz")
OUTPUT_ARGS = ("out",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
# The least a point takes before one has been timed (a loop's compile; qwen3-tiny's on 2 CPU cores: ~1.5 s): the
# budget drops a point it cannot hold before the point starts, the first one too.
MIN_POINT_S = 1.0
MATMUL_COMPILE_S = 0.3  # the least one matmul loop's compile takes (qwen3-tiny's on 2 CPU cores): the budget's guess
MATMUL_COPIES = 8  # weights of a matmul shape in one chain at most (each its own array: a compile grows with them)
CSV_COLUMNS = ("batch", "context", "k", "status", "step_ms", "engine_step_ms", "host_ms", "host_share", "call_ms",
               "floor_ms", "ratio_to_floor", "ratio_to_stream", "practical_ms", "ratio_to_practical",
               "practical_bound", "roofline_ms", "memory_bound", "kv_cache_bytes", "need_bytes", "compile_s",
               "oracle_ok", "note")
# A draft tree's points (--budgets), in trees.csv and grid.json's "trees", never among the chain's points (which the
# cost model and the per-row fit read): against the chain at K = its depth limit, same batch and context.
TREE_COLUMNS = ("batch", "context", "budget", "status", "step_ms", "chain_step_ms", "ratio_to_chain",
                "ratio_to_chain_high", "floor_ms", "practical_ms", "roofline_ms", "oracle_ok", "compile_s", "note")
MATMUL_COLUMNS = ("name", "n_in", "n_out", "rows", "copies", "calls", "seconds", "flops", "flops_per_s")


@dataclass(frozen=True)
class Point:
    """A chain's point (K = 0: plain decoding), or a draft tree's of `budget` nodes, whose k is its depth limit
    (block_size - 1: a step of the oracle commits k + 1 tokens either way)."""
    batch: int
    context: int
    k: int
    budget: int = 0

    @property
    def label(self) -> str:
        shape = f"tree budget={self.budget}" if self.budget else f"K={self.k}"
        return f"B={self.batch} context={self.context} {shape}"

    @property
    def verify_rows(self) -> int:
        """Rows per request the target verifies a step, and the most a step writes past its position."""
        return self.budget + 1 if self.budget else self.k + 1


def order(batches: Sequence[int], contexts: Sequence[int], ks: Sequence[int], budgets: Sequence[int] = (),
          depth: int = 0) -> list[Point]:
    """Most telling first, so that a budget that runs out drops the least: plain decoding at every point (the floor's
    own test), then the largest K, then the draft trees (depth limit `depth`), then the other Ks; within each, batch
    1 first, then larger batches, short contexts before long ones."""
    ranked = sorted(set(ks), key=lambda k: (k != 0, -k))
    grid = [(b, c) for b in sorted(set(batches)) for c in sorted(set(contexts))]
    chains = [[Point(b, c, k) for b, c in grid] for k in ranked]
    trees = [Point(b, c, depth, n) for n in sorted(set(budgets)) for b, c in grid]
    head = 2 if len(ranked) > 1 and ranked[0] == 0 else 1
    return [p for group in chains[:head] for p in group] + trees + [p for group in chains[head:] for p in group]


def cache_rows(context: int, block: int) -> int:
    """Cache rows per request: the span and the last verify's block, rounded up to 128 (decode.cache_length)."""
    return -(-(context + block) // 128) * 128


def point_caches(cfg: Any, dcfg: Any, point: Point, dtype: Any) -> list[Any]:
    """The caches a point's loop runs over: the target's and, at K > 0, the draft's; a static batch's stacked as
    the engine stacks them (batch.batch_cache)."""
    from benchmarks.engines.jax import batch as B  # lazy: imports jax, numpy, packaging, scipy
    from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging

    rows = cache_rows(point.context, max(dcfg.block_size, point.verify_rows))
    configs = [cfg] + ([dcfg.layers] if point.k else [])
    return [M.init_cache(c, rows, dtype) if point.batch == 1 else B.batch_cache(c, rows, dtype, point.batch)
            for c in configs]


def batch_of(one: Any, b: int) -> Any:
    """One request's start state repeated for a static batch of b rows, none idle yet."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    return {**jax.tree.map(lambda x: jnp.broadcast_to(x, (b, *jnp.shape(x))), one), "idle": jnp.zeros(b, jnp.int32)}


def need_bytes(cfg: Any, dcfg: Any, point: Point, itemsize: int) -> tuple[int, int]:
    """(KV cache bytes, cache + work space bytes) a point allocates beyond the weights: the target's and, for DFlash,
    the draft's caches of every request, the float32 logits of every verified and drafted row, and the float32
    attention scores of one layer (twice: scores and probabilities)."""

    rows = cache_rows(point.context, max(dcfg.block_size, point.verify_rows))
    per_token = kv_bytes_per_token(cfg, itemsize) + (kv_bytes_per_token(dcfg.layers, itemsize) if point.k else 0)
    kv = point.batch * rows * per_token
    queries = point.verify_rows + (dcfg.block_size if point.k else 0)
    logits = point.batch * queries * cfg.vocab_size * 4
    scores = 2 * point.batch * cfg.num_heads * max(point.verify_rows, dcfg.block_size if point.k else 1) \
        * (point.context + max(dcfg.block_size, point.verify_rows)) * 4
    return kv, kv + 2 * logits + scores


def weight_bytes(cfg: Any, dcfg: Any, dtype: Any) -> tuple[int, int]:
    """(the target's weight bytes, with the draft's): what a point holds beside its caches."""
    import jax  # lazy: jax

    from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging
    from benchmarks.engines.jax.draft import init_draft_params  # lazy: imports jax, numpy, packaging

    def size(make: Any) -> int:
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.eval_shape(make)))

    target = size(lambda: M.init_random_params(cfg, jax.random.key(0), dtype))
    return target, target + size(lambda: init_draft_params(dcfg, jax.random.key(1), dtype))


def free_device_bytes(memory_gb: float | None) -> tuple[float | None, str]:
    """(bytes free for a point's caches, where the figure comes from): --memory-gb, else the device's own memory
    statistics (limit less what is in use), else None (not checked)."""
    import jax  # lazy: jax

    if memory_gb is not None:
        return memory_gb * 1e9, f"--memory-gb {memory_gb:g}"
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), "the device's memory statistics"
    if jax.devices()[0].platform == "cpu" and (available := available_memory_bytes()) is not None:
        return available, "the host's available memory (/proc/meminfo)"
    return None, "unknown: this backend reports no memory statistics"


def op_kind(event_name: str) -> str:
    """An XLA op's kind and output shape, the same for every layer's copy of it: "%fusion.123 = bf16[4,128]{…} …"
    -> "fusion bf16[4,128]"."""
    name, _, rest = event_name.partition(" = ")
    shape = rest.split("{")[0].split(" ")[0] if rest else ""
    return f"{re.sub(r'[.0-9]+$', '', name.lstrip('%'))} {shape}".strip()


def profile_ops(trace_dir: Path, steps: int, top: int = 12) -> list[dict[str, Any]]:
    """The device ops of a jax.profiler trace of `steps` steps, summed by kind (`op_kind`) and longest first: kind,
    ms per step, calls per step, share of the device's op time. The loop that holds them is left out."""
    from jax.profiler import ProfileData  # lazy: jax

    files = glob.glob(str(trace_dir / "**" / "*.xplane.pb"), recursive=True)
    if not files:
        return []
    totals: dict[str, list[float]] = {}
    for plane in ProfileData.from_file(files[0]).planes:
        lines = [line for line in plane.lines if line.name == "XLA Ops"] if plane.name.startswith("/device:") else []
        for line in lines:
            for ev in line.events:
                if ev.name.startswith("%while"):
                    continue
                entry = totals.setdefault(op_kind(ev.name), [0.0, 0])
                entry[0] += ev.duration_ns / 1e6
                entry[1] += 1
    whole = sum(v[0] for v in totals.values()) or math.nan
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [{"op": kind, "ms": ms / steps, "calls": calls / steps, "share": ms / whole}
            for kind, (ms, calls) in ranked]


class Grid:
    """The points of one shape on this device; `result` is grid.json."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jax  # lazy: jax
        import jax.numpy as jnp  # lazy: jax

        from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging
        from benchmarks.engines.jax.draft import init_draft_params  # lazy: imports jax, numpy, packaging
        from benchmarks.hardware import detect  # lazy: imports numpy, scipy

        self.t_start = time.perf_counter()
        self.args = args
        self.hw = detect.detect()
        self.dtype = jnp.dtype(args.dtype or ("float32" if self.hw.platform == "cpu" else "bfloat16"))
        if self.hw.platform != "cpu":  # float32 as the engine multiplies it there
            M.full_precision(self.dtype)
        self.itemsize = jnp.dtype(self.dtype).itemsize
        self.cfg = M.with_attention(dataclasses.replace(resolve_shape(args.shape), weight_layout=M.platform_layout()),
                                    args.attention)
        self.dcfg = draft_config(self.cfg)
        weights = weight_bytes(self.cfg, self.dcfg, self.dtype)[1]
        free, source = free_device_bytes(None)  # the device's own figure: --memory-gb is what the caches may take
        if free is not None and weights > 0.9 * free:  # checked before the weights are allocated, on a CPU too
            raise BadInput(f"--shape {args.shape}: its weights and its draft's take {_gb(weights)}, {_gb(free)} free "
                           f"({source}); give a smaller shape (qwen3-tiny on a CPU)")
        self.tparams, self.dparams = oracle(M.init_random_params(self.cfg, jax.random.key(0), self.dtype),
                                            init_draft_params(self.dcfg, jax.random.key(1), self.dtype), self.cfg)
        self.device = self.hw.predictor(jnp.dtype(self.dtype).name, self.cfg.weight_layout, [], 0.0) \
            if self.hw.platform != "cpu" else None
        self.result: dict[str, Any] = {
            "shape": args.shape, "attention": args.attention, "dtype": jnp.dtype(self.dtype).name,
            "platform": self.hw.platform,
            "device": self.hw.device, "jax": jax.__version__, "jaxlib": _version("jaxlib"),
            "libtpu": _version("libtpu") or _version("libtpu-nightly"),
            "bandwidth_bytes_per_s": self.hw.bandwidth_bytes_per_s, "bandwidth_source": self.hw.bandwidth_source,
            "steps": args.steps, "repeats": args.repeats,
            "draft": {"layers": self.dcfg.layers.num_layers, "block_size": self.dcfg.block_size},
            "points": [], "skipped": [], "trees": [], "dropped": [], "violations": [],
        }
        gb = args.stream_gb if args.stream_gb is not None else 0.25 if self.hw.platform == "cpu" else 2.0
        self.result["stream"] = self._stream(gb) if gb else None
        self.result["matmul"] = self._matmul()
        self.traces = Path(tempfile.mkdtemp(prefix=".profile-", dir=output_folder(args.out)))  # made here, removed here
        bw = self.hw.bandwidth_bytes_per_s
        print(f"device-grid: {args.shape} ({self.result['dtype']}) on {self.hw.device}, jax {jax.__version__}; "
              f"bandwidth {bw / 1e9 if bw else math.nan:.0f} GB/s ({self.hw.bandwidth_source})"
              + f"; set up in {self.elapsed():.1f} s", flush=True)
        if self.result["stream"]:
            st = self.result["stream"]
            share = f" ({st['bytes_per_s'] / bw:.0%} of it)" if bw else ""
            print(f"device-grid: stream: a matrix-vector product reads {_gb(st['bytes'])} at "
                  f"{st['bytes_per_s'] / 1e9:.0f} GB/s{share}", flush=True)
        if self.result["matmul"]:
            print(matmul_lines(self.result["matmul"]), flush=True)

    def _stream(self, gb: float) -> dict[str, float] | None:
        """The stream's bandwidth, when its matrix (and the float32 draw it is cast from) fits the free memory."""
        free, source = free_device_bytes(self.args.memory_gb)
        need = gb * 1e9 * (1 + 4 / self.itemsize)
        if free is not None and need > 0.9 * free:
            self.result["stream_note"] = (f"not measured: {_gb(need)} to draw its matrix, {_gb(free)} free "
                                          f"({source}); give a smaller --stream-gb")
            print(f"device-grid: stream {self.result['stream_note']}", flush=True)
            return None
        return stream_bandwidth(self.dtype, self.cfg.hidden_size, gb)

    def _matmul(self) -> dict[str, Any] | None:
        """The matmul rates (benchmarks.hardware.matmul_rate): a large matmul, then each of the layer's matmuls at
        every row count asked, a chain over up to MATMUL_COPIES copies of its weight called often enough (twice at
        least) to read about --matmul-gb per loop; None with a note where they do not fit the free memory or the
        budget."""
        from benchmarks.hardware import matmul_rate, step_model  # lazy: imports jax, numpy, scipy

        cpu = self.hw.platform == "cpu"
        gb = self.args.matmul_gb if self.args.matmul_gb is not None else 0.01 if cpu else 1.0
        rows = sorted({r for r in self.args.matmul_rows if r})
        if not gb or not rows:
            return None
        n = 512 if cpu else 8192
        shapes = []
        for name, n_in, n_out in matmul_rate.layer_shapes(self.cfg):
            weights = max(1, round(gb * 1e9 / (n_in * n_out * self.itemsize)))
            copies = min(weights, MATMUL_COPIES)
            shapes.append((name, n_in, n_out, copies, max(2, round(weights / copies))))
        need = max([c * i * o * self.itemsize for _, i, o, c, _ in shapes] + [3 * n * n * self.itemsize])
        free, source = free_device_bytes(self.args.memory_gb)
        predicted = self._matmul_predicted_s(shapes, rows)
        if free is not None and need > 0.9 * free:
            self.result["matmul_note"] = (f"not measured: {_gb(need)} of weight copies, {_gb(free)} free "
                                          f"({source}); give a smaller --matmul-gb")
        elif self.left() < predicted:
            self.result["matmul_note"] = (f"not measured: ~{predicted:.0f} s predicted, {max(self.left(), 0):.0f} s "
                                          f"of the budget left; give fewer --matmul-rows or a larger --budget-s")
        if "matmul_note" in self.result:
            print(f"device-grid: matmul {self.result['matmul_note']}", flush=True)
            return None
        repeats = min(self.args.repeats, 5)
        peak = matmul_rate.peak_rate(self.dtype, n, repeats=repeats)
        measured = []
        for name, n_in, n_out, copies, calls in shapes:
            seconds = matmul_rate.shape_rates(self.dtype, n_in, n_out, copies, rows, calls, repeats)
            measured += [{"name": name, "n_in": n_in, "n_out": n_out, "rows": r, "copies": copies, "calls": calls,
                          "seconds": s, "flops": 2.0 * r * n_in * n_out, "flops_per_s": 2.0 * r * n_in * n_out / s}
                         for r, s in seconds.items()]
        rates = matmul_rate.by_rows(measured)
        # a chip's per-row term is a fraction of its datasheet peak; a CPU's of the fastest rate it reached (a busy
        # core can time the large matmul below a layer's)
        of, of_source = ((self.device.flops_per_s, f"{self.hw.device}'s datasheet peak") if self.device
                         else (max(peak["flops_per_s"], *rates.values()), "the fastest rate measured"))
        return {"method": matmul_rate.METHOD, "repeats": repeats, "peak": peak,
                "shapes": measured, "by_rows": {str(r): v for r, v in rates.items()},
                "rows_half": step_model.rows_half_from_rates(rates, of), "rows_half_of_flops_per_s": of,
                "rows_half_of": of_source}

    def _matmul_predicted_s(self, shapes: Sequence[tuple[str, int, int, int, int]], rows: Sequence[int]) -> float:
        """The least the matmul rates take: a compile per loop, and at the datasheet's figures where the device has
        them, every timed loop's matmuls."""
        loops = 1 + 2 * min(self.args.repeats, 5)
        compiles = (1 + len(shapes) * len(rows)) * MATMUL_COMPILE_S
        if self.device is None:
            return compiles
        work = sum(loops * calls * c * max(i * o * self.itemsize / self.device.bytes_per_s,
                                           2.0 * r * i * o / self.device.flops_per_s)
                   for _, i, o, c, calls in shapes for r in rows)
        return compiles + work

    def _practical(self, step: Any) -> tuple[float, bool] | None:
        """(The step's seconds at the practical roofline, whether it is compute-bound there), where the stream and
        the matmul rates were measured."""
        from benchmarks.hardware import matmul_rate  # lazy: imports jax, numpy

        stream, mm = self.result["stream"], self.result["matmul"]
        if not stream or not mm:
            return None
        return matmul_rate.practical_seconds(step, stream["bytes_per_s"], matmul_rate.rate_lookup(mm["shapes"]),
                                             mm["peak"]["flops_per_s"])

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.args.budget_s - self.elapsed()

    def save(self) -> None:
        atomic_write_json(self.args.out / "grid.json", _finite(self.result))
        atomic_write_csv(self.args.out / "grid.csv", CSV_COLUMNS, self.result["points"] + self.result["skipped"])
        if self.result["matmul"]:
            atomic_write_csv(self.args.out / "matmul.csv", MATMUL_COLUMNS, self.result["matmul"]["shapes"])
        if self.result["trees"]:
            atomic_write_csv(self.args.out / "trees.csv", TREE_COLUMNS, self.result["trees"])

    def step(self, point: Point) -> Any:
        """What one step of the point reads and computes (benchmarks.hardware.step_cost)."""

        if point.k == 0:
            return step_cost.ar_step(self.cfg, point.context, self.itemsize, point.batch)
        if point.budget:
            return step_cost.tree_step(self.cfg, self.dcfg.layers, len(self.dcfg.target_layer_ids), point.budget,
                                       self.dcfg.block_size, point.context, self.itemsize, point.batch)
        return step_cost.dflash_step(self.cfg, self.dcfg.layers, len(self.dcfg.target_layer_ids), point.k,
                                     self.dcfg.block_size, point.context, self.itemsize, point.batch)

    def loop(self, point: Point) -> tuple[Callable[[int], Any], Callable[[Any], tuple[Any, ...]]]:
        """(state for a loop of n steps, the engine's loop over the point's span taking that state), the caches kept
        between calls (they are donated)."""
        import jax  # lazy: jax
        import jax.numpy as jnp  # lazy: jax
        import numpy as np  # lazy: numpy

        from benchmarks.engines.jax import batch as B  # lazy: imports jax, numpy, packaging, scipy
        from benchmarks.engines.jax import decode  # lazy: imports jax, numpy, packaging, scipy

        b, k, span = point.batch, point.k, point.context
        width = span + k + 2
        caches = point_caches(self.cfg, self.dcfg, point, self.dtype)
        taps = len(self.dcfg.target_layer_ids) * self.cfg.hidden_size
        eos = decode.eos_array(())
        key = jax.random.key(0)

        def state(n: int) -> Any:
            """n steps from the position that leaves the last step inside the span (n = 0: done at once)."""
            length = np.int32(span - max(n, 1) * (k + 1))
            limit = np.int32(1 + n * (k + 1))
            pending = jnp.zeros((k + 1, taps), self.dtype) if k else None
            one = decode.start_state(jnp.int32(10), length, limit, eos, width, pending, bool(point.budget))
            return one if b == 1 else batch_of(one, b)

        keys = jax.vmap(jax.random.key)(jnp.arange(b, dtype=jnp.uint32)) if b > 1 else key

        def run(st: Any) -> tuple[Any, ...]:
            nonlocal caches
            if k == 0 and b == 1:
                out = decode.ar_steps(self.tparams, st, caches[0], key, None, tcfg=self.cfg, span=span)
            elif k == 0:
                out = B.ar_batch_steps(self.tparams, st, caches[0], keys, None, tcfg=self.cfg, span=span)
            elif point.budget and b == 1:
                out = decode.tree_steps(self.tparams, self.dparams, st, caches[0], caches[1], key, None,
                                        dcfg=self.dcfg, tcfg=self.cfg, budget=point.budget, span=span)
            elif point.budget:
                out = B.tree_batch_steps(self.tparams, self.dparams, st, caches[0], caches[1], keys, None,
                                         dcfg=self.dcfg, tcfg=self.cfg, budget=point.budget, span=span)
            elif b == 1:
                out = decode.spec_steps(self.tparams, self.dparams, st, caches[0], caches[1], key, None,
                                        dcfg=self.dcfg, tcfg=self.cfg, k=k, num_queries=self.dcfg.block_size,
                                        span=span)
            else:
                out = B.spec_batch_steps(self.tparams, self.dparams, st, caches[0], caches[1], keys, None,
                                         dcfg=self.dcfg, tcfg=self.cfg, k=k, num_queries=self.dcfg.block_size,
                                         span=span)
            caches = list(out[1:])
            return out

        return state, run

    def measure(self, point: Point) -> dict[str, Any]:
        import jax  # lazy: jax
        import numpy as np  # lazy: numpy

        n, reps = self.args.steps, self.args.repeats
        state, run = self.loop(point)

        def timed(st: Any) -> tuple[float, Any]:
            st = jax.block_until_ready(st)
            t0 = time.perf_counter()
            out = run(st)
            got = jax.device_get({name: out[0][name] for name in ("count", "done")
                                  + (("accepts", "steps") if point.k else ())})
            return time.perf_counter() - t0, got

        def as_the_engine_times() -> float:
            """Seconds per step from the moment a step's input exists, the loop dispatched behind earlier work
            (in the engine, the prefill): the engine's TPOT clock, which sees the host only where it stalls."""
            ahead = run(state(n))  # device work the next loop's dispatch hides behind, as the prefill in the engine
            out = run(state(n))
            jax.block_until_ready(ahead[0]["count"])
            t0 = time.perf_counter()
            jax.device_get(out[0]["count"])
            return (time.perf_counter() - t0) / n

        t0 = time.perf_counter()
        timed(state(0))  # compiles; a loop with nothing to do
        compile_s = time.perf_counter() - t0
        _, got = timed(state(n))  # warm-up
        full, empty, engine = [], [], []
        for _ in range(reps):  # the variants in turn, so that drift falls on all
            full.append(timed(state(n))[0])
            empty.append(timed(state(0))[0])
            engine.append(as_the_engine_times())
        device_s = (float(np.median(full)) - float(np.median(empty))) / n
        repeats_ms = [1e3 * (f - float(np.median(empty))) / n for f in full]
        engine_s = float(np.median(engine))
        done = bool(np.all(got["done"]))
        oracle_ok = done and (not point.k or bool(np.all(np.asarray(got["accepts"])[..., :n] == point.k)))
        figures = {"compile_s": compile_s, "step_ms": 1e3 * device_s, "engine_step_ms": 1e3 * engine_s,
                   "host_ms": 1e3 * (engine_s - device_s), "host_share": (engine_s - device_s) / engine_s,
                   "call_ms": 1e3 * float(np.median(empty)), "oracle_ok": oracle_ok, "step_ms_repeats": repeats_ms}
        if self.args.profile_above and self._profile_wanted(point, figures):
            trace = self.traces / f"b{point.batch}-c{point.context}-k{point.k}-t{point.budget}"
            with jax.profiler.trace(str(trace)):
                timed(state(n))
            figures["profile"] = profile_ops(trace, n)
        return figures

    def _profile_wanted(self, point: Point, figures: dict[str, Any]) -> bool:
        """Fewer than --profile-max profiled yet (chains' and trees' together), and the step above --profile-above
        times its roofline: its bytes at the datasheet's bandwidth where memory-bound, its FLOPs at the datasheet's
        peak where compute-bound (a tree's verify of many rows is)."""
        from benchmarks.hardware import roofline  # lazy: imports numpy, scipy

        done = sum(1 for p in (*self.result["points"], *self.result["trees"]) if p.get("profile"))
        if self.device is None or done >= self.args.profile_max:
            return False
        return figures["step_ms"] > self.args.profile_above * 1e3 * roofline.step_seconds(self.step(point), self.device)

    def _floor_ms(self, point: Point) -> float:
        bw = self.hw.bandwidth_bytes_per_s
        return 1e3 * self.step(point).bytes() / bw if bw else math.nan

    def _memory_bound(self, point: Point) -> bool | None:
        from benchmarks.hardware import roofline  # lazy: imports numpy, scipy

        if self.device is None:
            return None
        return not any(roofline.compute_bound(p, self.device) for p in self.step(point).passes)

    def row(self, point: Point, status: str, note: str = "", **figures: Any) -> dict[str, Any]:
        from benchmarks.hardware import roofline  # lazy: imports numpy, scipy

        step = self.step(point)
        kv, need = need_bytes(self.cfg, self.dcfg, point, self.itemsize)
        floor = self._floor_ms(point)
        row = {"batch": point.batch, "context": point.context, "k": point.k, "status": status, "note": note,
               **({"budget": point.budget} if point.budget else {}),
               "floor_ms": floor, "step_bytes": step.bytes(),
               "step_flops": step.flops(), "kv_cache_bytes": kv, "need_bytes": need,
               "roofline_ms": 1e3 * roofline.step_seconds(step, self.device) if self.device else math.nan,
               "memory_bound": self._memory_bound(point), **figures}
        if "step_ms" in figures:
            row["ratio_to_floor"] = figures["step_ms"] / floor
            stream = self.result["stream"]
            if stream:  # the step against its bytes at the bandwidth the device's own op reached
                row["ratio_to_stream"] = figures["step_ms"] * stream["bytes_per_s"] / (1e3 * step.bytes())
        practical = self._practical(step)
        if practical is not None:
            row["practical_ms"] = 1e3 * practical[0]
            row["practical_bound"] = "compute" if practical[1] else "memory"
            if "step_ms" in figures:
                row["ratio_to_practical"] = figures["step_ms"] / row["practical_ms"]
        return row

    def against_chain(self, row: dict[str, Any]) -> dict[str, Any]:
        """A tree's row with the chain's step at its depth limit (same batch and context, measured before it): the
        ratio of medians, and its high end over the repeats (the slowest tree loop over the fastest chain loop),
        which a "within 1.1x" is read from."""
        chain = next((p for p in self.result["points"] if (p["batch"], p["context"], p["k"])
                      == (row["batch"], row["context"], row["k"])), None)
        if chain is None:
            return {**row, "note": f"no chain point at K={row['k']} to compare with (give --ks {row['k']})"}
        return {**row, "chain_step_ms": chain["step_ms"], "ratio_to_chain": row["step_ms"] / chain["step_ms"],
                "ratio_to_chain_high": max(row["step_ms_repeats"]) / min(chain["step_ms_repeats"])}

    def predicted_s(self, point: Point) -> float:
        """The least a point can take before one has been timed: a compile, and its timed loops at its floor."""
        loops = 1 + 3 * self.args.repeats  # the warm-up, then per repeat the full loop and the engine's clock's two
        floor_s = as_float(self._floor_ms(point)) / 1e3
        return MIN_POINT_S + (loops * self.args.steps * floor_s if math.isfinite(floor_s) else 0.0)

    def run(self, points: list[Point]) -> int:
        try:
            return self._run(points)
        finally:
            shutil.rmtree(self.traces, ignore_errors=True)

    def _run(self, points: list[Point]) -> int:
        need_s = 0.0
        for i, point in enumerate(points):
            kv, need = need_bytes(self.cfg, self.dcfg, point, self.itemsize)
            free, source = free_device_bytes(self.args.memory_gb)
            if free is not None and need > 0.9 * free:
                note = (f"does not fit: {_gb(kv)} of KV cache, {_gb(need)} with its work space, {_gb(free)} free "
                        f"({source})")
                self.result["trees" if point.budget else "skipped"].append(self.row(point, "skipped", note))
                print(f"device-grid: {point.label}: {note}", flush=True)
                continue
            predicted = max(need_s, self.predicted_s(point))
            if (left := self.left()) < predicted:  # the first point too: a budget is checked before a point starts
                names = ", ".join(p.label for p in points[i:])
                self.result["dropped"].append(f"{names}: need ~{predicted:.0f} s, {max(left, 0):.0f} s left")
                print(f"device-grid: dropped for time: {names}", flush=True)
                break
            t0 = time.perf_counter()
            try:
                figures = self.measure(point)
            except Exception as exc:  # XLA's RESOURCE_EXHAUSTED (or any failure at one point) leaves the others
                note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                self.result["trees" if point.budget else "skipped"].append(self.row(point, "failed", note))
                print(f"device-grid: {point.label}: FAILED {note}", flush=True)
                continue
            need_s = max(need_s, 1.3 * (time.perf_counter() - t0))
            row = self.row(point, "ok", **figures)
            if row["step_ms"] < row["floor_ms"]:
                self.result["violations"].append(f"{point.label}: {row['step_ms']:.3f} ms is below its floor "
                                                  f"{row['floor_ms']:.3f} ms: a timing error, not a result")
            if not row["oracle_ok"]:
                self.result["violations"].append(f"{point.label}: the oracle loop did not run every step with "
                                                  f"every draft accepted")
            if point.budget:
                row = self.against_chain(row)
                self.result["trees"].append(row)
            else:
                self.result["points"].append(row)
            self.save()
            print(f"device-grid: {point_line(row)}", flush=True)
        self.save()
        if any(self.traces.iterdir()):  # the traces as one file (the device tool brings back 8)
            archive = shutil.make_archive(str(self.traces), "gztar", self.traces)
            atomic_write_bytes(self.args.out / "profile.tar.gz", Path(archive).read_bytes())
            Path(archive).unlink()
        for line in self.result["violations"]:
            print(f"device-grid: VIOLATION {line}")
        print(f"device-grid: {len(self.result['points'])} points measured, {len(self.result['trees'])} tree points, "
              f"{len(self.result['skipped'])} skipped, "
              f"{len(self.result['dropped'])} dropped, in {self.elapsed():.0f} s; wrote {self.args.out / 'grid.json'}",
              flush=True)
        if self.result["violations"]:
            return Exit.VIOLATION
        if points and not self.result["points"]:  # nothing measured: no result, whatever the reason
            print("device-grid: no point was measured (above)", flush=True)
            return Exit.NOT_CHECKED if self.result["dropped"] and not self.result["skipped"] else Exit.FAILED
        return Exit.OK


def stream_bandwidth(dtype: Any, width: int, gb: float, n: int = 8, repeats: int = 5) -> dict[str, float]:
    """What the device reads weights at in the step's own op: a [1, width] row times a [width, N] matrix of about
    `gb` GB, n in a loop on the device (each the next's input), the median of `repeats` less a loop of none.

    A matrix-vector product is how a decode step reads its weights, so this is the bandwidth a step can reach: the
    floor at the datasheet's bandwidth over it is what the kernels leave, not the step's own waste.
    """
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax
    import numpy as np  # lazy: numpy

    cols = max(width, int(gb * 1e9 / (width * jnp.dtype(dtype).itemsize)) // width * width)
    w = jax.random.normal(jax.random.key(2), (width, cols), dtype)

    @jax.jit
    def loop(x: jax.Array, w: jax.Array, count: jax.Array) -> jax.Array:
        def body(_: Any, x: jax.Array) -> jax.Array:
            y = jnp.dot(x, w, preferred_element_type=jnp.float32)
            return (y.reshape(1, -1, width).sum(axis=1) * 1e-3).astype(x.dtype)
        return jax.lax.fori_loop(0, count, body, x)

    x = jnp.ones((1, width), dtype)

    def timed(count: int) -> float:
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x, w, jnp.int32(count)))
        return time.perf_counter() - t0

    timed(n)
    full, empty = [], []
    for _ in range(repeats):
        full.append(timed(n))
        empty.append(timed(0))
    seconds = (float(np.median(full)) - float(np.median(empty))) / n
    nbytes = float(w.size * w.dtype.itemsize)
    return {"bytes": nbytes, "seconds": seconds, "bytes_per_s": nbytes / seconds}


def matmul_lines(mm: dict[str, Any]) -> str:
    """The matmul rates in words: the peak, the rate at each row count, the per-row term fitted to them."""
    peak = mm["peak"]
    rows = ", ".join(f"{r} rows {v / 1e12:.3g}" for r, v in mm["by_rows"].items())
    return (f"device-grid: matmul: {peak['n']}^3 at {peak['flops_per_s'] / 1e12:.3g} TFLOP/s; the layer's matmuls "
            f"at the model's widths: {rows} TFLOP/s; per-row term rows / (rows + {mm['rows_half']:.0f}) of "
            f"{mm['rows_half_of_flops_per_s'] / 1e12:.3g} TFLOP/s ({mm['rows_half_of']}); timed: {mm['method']}")


def point_line(r: dict[str, Any]) -> str:
    """One measured point in words."""
    bound = {True: "memory-bound", False: "compute-bound", None: "bound unknown"}[r["memory_bound"]]
    shape = f"tree {r['budget']:<3}" if r.get("budget") else f"K={r['k']:<2}"
    line = (f"B={r['batch']:<3} context={r['context']:<5} {shape} step {r['step_ms']:8.3f} ms | floor "
            f"{as_float(r['floor_ms']):8.3f} ms ({as_float(r['ratio_to_floor']):.2f}x"
            + (f", {r['ratio_to_stream']:.2f}x at the stream's" if r.get("ratio_to_stream") else "") + ")"
            + (f" | practical {r['practical_ms']:8.3f} ms ({r['ratio_to_practical']:.2f}x, {r['practical_bound']})"
               if r.get("ratio_to_practical") else "") + ", roofline "
            f"{as_float(r['roofline_ms']):8.3f} ms ({bound}) | "
            f"host {r['host_ms']:+.4f} ms ({100 * r['host_share']:+.2f} %), a call {r['call_ms']:.2f} ms | "
            f"KV {_gb(r['kv_cache_bytes'])} | compile {r['compile_s']:.1f} s")
    if r.get("ratio_to_chain"):
        line += (f" | {r['ratio_to_chain']:.3f}x the chain's step at K={r['k']} "
                 f"(at most {r['ratio_to_chain_high']:.3f}x over the repeats)")
    for op in r.get("profile") or []:
        line += f"\n    {op['ms']:7.3f} ms/step {100 * op['share']:5.1f} % x{op['calls']:<5.0f} {op['op']}"
    return line


def _finite(value: Any) -> Any:
    """A JSON value with every NaN as null (a figure a CPU has none of: its roofline without a chip)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def add_point_args(ap: argparse.ArgumentParser, batch: tuple[int, ...], context: tuple[int, ...],
                   ks: tuple[int, ...]) -> None:
    """The options that name a grid's points (shared with study chip-compile), with their defaults."""
    ap.add_argument("--shape", default="qwen3-4b", help="a named shape of the JAX model (or qwen3-tiny on a CPU)")
    ap.add_argument("--batch", type=Bounded(int, 1, 4096, many=True), default=batch,
                    help="batch sizes, powers of 2 up to 64")
    ap.add_argument("--context", type=Bounded(int, 1, 1 << 24, many=True), default=context,
                    help="cache rows every step reads")
    ap.add_argument("--ks", type=Bounded(int, 0, 1024, many=True), default=ks, help="0 (plain decoding) and DFlash Ks")
    ap.add_argument("--attention", choices=("xla", "pallas"), default="xla",
                    help="the target's attention over its cache (the JAX engine's option attention)")
    ap.add_argument("--budgets", type=Bounded(int, 1, 1024, many=True), default=(),
                    help="draft-tree (DDTree) budgets too, at the draft's depth limit (device-grid times each "
                         "against the chain at K = block_size - 1: give that K in --ks)")


def point_problems(args: argparse.Namespace, steps: int) -> list[str]:
    """What is wrong with the points the options name, each with its option (BadInput for an unknown shape)."""
    from benchmarks.engines.jax.batch import BATCH_SIZES  # lazy: imports jax, numpy, packaging, scipy

    try:
        cfg = resolve_shape(args.shape)
    except KeyError:
        raise BadInput(f"--shape {args.shape}: not a named shape of benchmarks/core/shapes.py SHAPES or a CPU "
                       f"stand-in of benchmarks/studies/device.py") from None
    problems = [f"--batch {b}: the engine's batch sizes are {', '.join(map(str, BATCH_SIZES))}"
                for b in args.batch if b not in BATCH_SIZES]
    block = draft_config(cfg).block_size
    problems += [f"--ks {k}: DFlash's K runs 1..{block - 1} (0 is plain decoding)" for k in args.ks if k >= block]
    deepest = max([*args.ks, *([block - 1] if getattr(args, "budgets", ()) else [])])  # a tree: its depth limit
    least = steps * (deepest + 1) + 1
    return problems + [f"--context {c}: {steps} step{'s' if steps > 1 else ''} of K + 1 tokens must fit inside it "
                       f"(at least {least})" for c in args.context if c < least]


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    add_point_args(ap, (1, 4, 16, 64), (256, 2048, 8192), (0, 7, 15))
    ap.add_argument("--dtype", choices=("bfloat16", "float32"),
                    help="weights' and caches' dtype (default float32 on a CPU, bfloat16 on an accelerator); float32 "
                         "multiplies at full precision, as the engine does")
    ap.add_argument("--steps", type=Bounded(int, 1, 100_000), default=12, help="steps per timed loop")
    ap.add_argument("--repeats", type=Bounded(int, 1, 10_000), default=5, help="timed loops per point (medians)")
    ap.add_argument("--budget-s", type=Bounded(float, 1, 604_800), default=480.0,
                    help="seconds for everything, compiles included")
    ap.add_argument("--memory-gb", type=Bounded(float, 0.01, 100_000),
                    help="memory free for a point's caches (default: the device's own statistics; unchecked where "
                         "it has none)")
    ap.add_argument("--profile-above", type=Bounded(float, 0, 1e6), default=0.0,
                    help="profile points above this many times their roofline (0: none)")
    ap.add_argument("--profile-max", type=Bounded(int, 0, 1000), default=3, help="points profiled at most")
    ap.add_argument("--stream-gb", type=Bounded(float, 0, 8),
                    help="GB of the matrix whose matrix-vector product measures the read bandwidth (default 2 on an "
                         "accelerator, 0.25 on a CPU; 0: none)")
    ap.add_argument("--matmul-gb", type=Bounded(float, 0, 8),
                    help="GB of each layer matmul's stacked weights when its rate is timed by row count (default 1 "
                         "on an accelerator, 0.01 on a CPU; 0: no matmul rates, no practical roofline)")
    ap.add_argument("--matmul-rows", type=Bounded(int, 0, 65536, many=True), default=ROWS,
                    help="the row counts the layer's matmuls are timed at (0: none)")
    ap.add_argument("--out", type=Path, help="output folder (default results/device-check/grid-<shape>)")


def main(args: argparse.Namespace) -> int:
    problems = environment_problems(["DFLASH_BANDWIDTH_GBS", "PLATFORM"]) + point_problems(args, args.steps)
    if problems:
        raise BadInput(problems)
    args.out = args.out or ROOT / "results" / "device-check" / f"grid-{args.shape}"
    check_outputs(args.out, OUTPUTS)
    depth = draft_config(resolve_shape(args.shape)).block_size - 1
    return Grid(args).run(order(args.batch, args.context, args.ks, args.budgets, depth))


if __name__ == "__main__":  # where the CLI's own imports (yaml, pandas) are missing, as on a bare accelerator machine
    run_alone("python -m benchmarks.studies.device_grid", add_cli_args, main)
