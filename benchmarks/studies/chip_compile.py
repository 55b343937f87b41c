"""The JAX engine's loops compiled for a TPU on any machine, with no chip (study chip-compile): what the chip's own
compiler makes of a change before a chip is at hand.

    python -m benchmarks.studies.chip_compile --chip v5e --shape qwen3-4b --batch 1,16,64 --context 256,2048 \
        --ks 0,7 [--out DIR]
    make chip-compile CHIP_ARGS="..."     the same in .venv-chip (JAX, jaxlib and libtpu at the chip's releases)

JAX compiles ahead of time for a TPU it describes (`jax.experimental.topologies`) with libtpu's compiler: no device
runs and no weight is allocated. Each point is `study device-grid`'s: the engine's loop over one span
(`decode.ar_steps` / `spec_steps` / `tree_steps` at B = 1, `batch.ar_batch_steps` / `spec_batch_steps` /
`tree_batch_steps` above; a draft tree's with `--budgets`), its arguments abstract. Per point, from the compiled
program:
- temp: what XLA allocates beside the arguments and outputs (its memory analysis), against the caches' bytes;
- cache copies: copy ops whose result has a cache's shape, each a pass over that cache (a layout XLA changed inside
  the loop, or an update it could not do in place);
- the compile's seconds.
A point that copies a cache exits VIOLATION: the engine keeps its caches in place (docs/engine-findings.md).
`--chip cpu` compiles for this machine's CPU instead. What the v5e's compiler gave: docs/tpu.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

# The harness's modules below import jax, numpy and scipy at most: no yaml, no pandas
from benchmarks.core.atomic import atomic_write_csv, atomic_write_json, check_outputs, output_folder
from benchmarks.core.exit_codes import BadInput, Exit, run_alone
from benchmarks.core.paths import ROOT
from benchmarks.studies.device import draft_config, resolve_shape
from benchmarks.studies.device_grid import (
    Point,
    add_point_args,
    batch_of,
    need_bytes,
    order,
    point_caches,
    point_problems,
    weight_bytes,
)

# The chips JAX describes without one, as its topology names them: one chip, one host.
TOPOLOGIES = {"v5e": "v5e:1x1", "v5p": "v5p:1x1x1", "v6e": "v6e:1x1"}
# HBM per chip, GiB (cloud.google.com/tpu/docs/v5e, v5p, v6e): a point whose caches and work space pass 90 % of what
# the weights leave of it is named with its bytes and not compiled, as study device-grid skips it on the chip.
HBM_GIB = {"v5e": 16, "v5p": 95, "v6e": 32}
OUTPUTS = ("chip-compile.json", "chip-compile.csv")  # what it writes into --out (checked before any work)
OUTPUT_ARGS = ("out",)  # checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
CSV_COLUMNS = ("batch", "context", "k", "budget", "status", "cache_bytes", "temp_bytes", "argument_bytes",
               "output_bytes", "alias_bytes", "cache_copies", "compile_s", "note")
COPY = re.compile(r"= \w+\[([\d,]*)\]\{[^}]*\} copy(?:-start)?\(")


def cache_copies(hlo: str, shapes: set[tuple[int, ...]]) -> int:
    """Copy ops in an optimised HLO module's text whose result has one of `shapes` (in any layout)."""
    return sum(tuple(int(d) for d in m.group(1).split(",") if d) in shapes for m in COPY.finditer(hlo))


def target_device(chip: str) -> Any:
    """The device to compile for: this machine's CPU, or a TPU chip as JAX describes it (libtpu's compiler)."""
    import jax  # lazy: jax

    if chip == "cpu":
        return jax.devices("cpu")[0]
    from jax.experimental import topologies  # lazy: jax

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compiling takes no chip: no lock on one
    try:
        topology = topologies.get_topology_desc(topology_name=TOPOLOGIES[chip], platform="tpu",
                                                chips_per_host_bounds=(1, 1, 1))
    except Exception as exc:  # no libtpu, or one that does not know the chip
        raise BadInput(f"--chip {chip}: JAX could not describe the TPU ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0][:200]}); it needs libtpu's compiler: `make chip-compile` runs this "
                       f"in a venv of its own that has it") from None
    return topology.devices[0]


def compile_point(point: Point, cfg: Any, dcfg: Any, dtype: Any, device: Any) -> Any:
    """The engine's loop at `point` compiled for `device`, every argument abstract (shapes and dtypes only)."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax
    from jax.sharding import SingleDeviceSharding  # lazy: jax

    from benchmarks.engines.jax import batch as B  # lazy: imports jax, numpy, packaging, scipy
    from benchmarks.engines.jax import decode  # lazy: imports jax, numpy, packaging, scipy
    from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging
    from benchmarks.engines.jax.draft import init_draft_params  # lazy: imports jax, numpy, packaging

    on = SingleDeviceSharding(device)
    b, k, span = point.batch, point.k, point.context

    def abstract(make: Any) -> Any:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on), jax.eval_shape(make))

    def state() -> Any:
        taps = len(dcfg.target_layer_ids) * cfg.hidden_size
        pending = jnp.zeros((k + 1, taps), dtype) if k else None
        one = decode.start_state(jnp.int32(10), jnp.int32(span - k - 1), jnp.int32(k + 2),
                                 jnp.asarray(decode.eos_array(())), span + k + 2, pending, bool(point.budget))
        return one if b == 1 else batch_of(one, b)

    tparams = abstract(lambda: M.init_random_params(cfg, jax.random.key(0), dtype))
    st, caches = abstract(state), abstract(lambda: point_caches(cfg, dcfg, point, dtype))
    tcache = caches[0]
    keys = abstract(lambda: jax.random.key(0) if b == 1 else jax.vmap(jax.random.key)(jnp.arange(b, dtype=jnp.uint32)))
    if k == 0:
        traced = decode.ar_steps.trace(tparams, st, tcache, keys, None, tcfg=cfg, span=span) if b == 1 else \
            B.ar_batch_steps.trace(tparams, st, tcache, keys, None, tcfg=cfg, span=span)
    else:
        dparams, dcache = abstract(lambda: init_draft_params(dcfg, jax.random.key(1), dtype)), caches[1]
        if point.budget:
            tree = decode.tree_steps if b == 1 else B.tree_batch_steps
            traced = tree.trace(tparams, dparams, st, tcache, dcache, keys, None, dcfg=dcfg, tcfg=cfg,
                                budget=point.budget, span=span)
        else:
            spec = decode.spec_steps if b == 1 else B.spec_batch_steps
            traced = spec.trace(tparams, dparams, st, tcache, dcache, keys, None, dcfg=dcfg, tcfg=cfg, k=k,
                                num_queries=dcfg.block_size, span=span)
    return traced.lower(lowering_platforms=(device.platform,)).compile()


def measure(point: Point, cfg: Any, dcfg: Any, dtype: Any, device: Any) -> dict[str, Any]:
    """One point compiled: its memory and its copies of a cache."""
    import jax  # lazy: jax

    t0 = time.perf_counter()
    compiled = compile_point(point, cfg, dcfg, dtype, device)
    compile_s = time.perf_counter() - t0
    shapes = {tuple(x.shape) for x in jax.tree.leaves(jax.eval_shape(lambda: point_caches(cfg, dcfg, point, dtype)))}
    memory = compiled.memory_analysis()
    return {"temp_bytes": memory.temp_size_in_bytes, "argument_bytes": memory.argument_size_in_bytes,
            "output_bytes": memory.output_size_in_bytes, "alias_bytes": memory.alias_size_in_bytes,
            "cache_copies": cache_copies(compiled.as_text(), shapes), "compile_s": compile_s}


def point_line(r: dict[str, Any]) -> str:
    copies = f"{r['cache_copies']} cache copies" + (" (COPIES THE CACHE)" if r["cache_copies"] else "")
    shape = f"tree {r['budget']}" if r.get("budget") else f"K={r['k']:<2}"
    return (f"B={r['batch']:<3} context={r['context']:<5} {shape} | caches "
            f"{r['cache_bytes'] / 1e9:.2f} GB, temp {r['temp_bytes'] / 1e9:.3f} GB | {copies} | compile "
            f"{r['compile_s']:.0f} s")


def run(args: argparse.Namespace) -> int:
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging

    device = target_device(args.chip)
    layout = "io" if args.chip == "cpu" else "oi"  # model.platform_layout of the platform compiled for
    cfg = M.with_attention(dataclasses.replace(resolve_shape(args.shape), weight_layout=layout), args.attention)
    dcfg = draft_config(cfg)
    dtype = jnp.dtype(args.dtype)
    if dtype == jnp.float32 and args.chip != "cpu":
        M.full_precision(dtype)  # as the engine multiplies float32 on a chip
    result: dict[str, Any] = {"chip": args.chip, "device_kind": device.device_kind, "shape": args.shape,
                              "attention": args.attention, "dtype": dtype.name, "jax": jax.__version__, "points": []}
    output_folder(args.out)
    print(f"chip-compile: {args.shape} ({dtype.name}) compiled for {device.device_kind}, jax {jax.__version__}",
          flush=True)
    weights = weight_bytes(cfg, dcfg, dtype)
    for point in order(args.batch, args.context, args.ks, getattr(args, "budgets", ()), dcfg.block_size - 1):
        kv, need = need_bytes(cfg, dcfg, point, dtype.itemsize)
        row: dict[str, Any] = {"batch": point.batch, "context": point.context, "k": point.k,
                               **({"budget": point.budget} if point.budget else {}), "cache_bytes": kv}
        free = HBM_GIB.get(args.chip, 0) * 2**30 - weights[point.k > 0]
        if args.chip != "cpu" and need > 0.9 * free:
            row |= {"status": "skipped", "note": f"does not fit: {need / 1e9:.2f} GB of caches and work space, "
                                                 f"against {free / 1e9:.2f} GB that {weights[point.k > 0] / 1e9:.2f} "
                                                 f"GB of weights leave of {HBM_GIB[args.chip]} GiB of HBM"}
            print(f"chip-compile: {point.label}: {row['note']}", flush=True)
        else:
            try:
                row |= {"status": "ok", **measure(point, cfg, dcfg, dtype, device)}
                print(f"chip-compile: {point_line(row)}", flush=True)
            except Exception as exc:  # a point the compiler refuses leaves the others
                row |= {"status": "failed", "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
                print(f"chip-compile: {point.label}: FAILED {row['note']}", flush=True)
        result["points"].append(row)
        atomic_write_json(args.out / "chip-compile.json", result)
    atomic_write_csv(args.out / "chip-compile.csv", CSV_COLUMNS, result["points"])
    copying = [r for r in result["points"] if r.get("cache_copies")]
    failed, skipped = ([r for r in result["points"] if r["status"] == s] for s in ("failed", "skipped"))
    print(f"chip-compile: {len(result['points'])} points, {len(copying)} copy a cache, {len(failed)} failed, "
          f"{len(skipped)} skipped; wrote {args.out / 'chip-compile.json'}", flush=True)
    if failed and not any(r["status"] == "ok" for r in result["points"]):  # no point compiled: no result
        print("chip-compile: no point was compiled (above)", flush=True)
        return Exit.FAILED
    return Exit.VIOLATION if copying or failed else Exit.OK


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--chip", choices=("cpu", *TOPOLOGIES), default="v5e",
                    help="the TPU to compile for (needs libtpu: make chip-compile), or this machine's CPU")
    add_point_args(ap, (1, 16, 64), (256, 2048), (0, 7))
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--out", type=Path, help="output folder (default results/chip-compile/<chip>-<shape>)")
    ap.add_argument("--check-only", action="store_true",
                    help="check the options, the points and the output folder, then stop (make chip-compile does "
                         "this before it builds its venv)")


def main(args: argparse.Namespace) -> int:
    problems = point_problems(args, 1)
    if problems:
        raise BadInput("; ".join(problems))
    args.out = args.out or ROOT / "results" / "chip-compile" / f"{args.chip}-{args.shape}"
    check_outputs(args.out, OUTPUTS)
    if getattr(args, "check_only", False):  # a namespace built by a caller may lack the option
        return Exit.OK
    return run(args)


if __name__ == "__main__":  # in .venv-chip, which holds JAX and libtpu only (no yaml, no pandas)
    run_alone("python -m benchmarks.studies.chip_compile", add_cli_args, main)
