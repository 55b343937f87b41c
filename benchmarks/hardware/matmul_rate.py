"""The device's matmul rate as the verify multiplies, and the practical roofline it gives a step.

Measured on the device (study device-grid), as its matrix-vector stream is:
- the peak: an n x n x n matmul in the step's dtype (the most FLOP/s the device's compiler reaches);
- by row count: each of a layer's matmuls at the model's widths (hidden x qkv, q x hidden, hidden x 2·intermediate,
  intermediate x hidden) over 16 to 1,024 rows, over `copies` weights of that shape, each its own array and the
  chain unrolled as the engine runs its layers, so that each one streams from memory.

Every figure is timed the same way (`METHOD`). The practical roofline of a step (`practical_seconds`) charges each
pass max(its bytes at the measured stream rate, its matmul FLOPs at the measured rate at their row count plus its
attention's FLOPs at the measured peak): what the device's own ops allow, beside the datasheet's floor.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.core.shapes import ModelConfig
from benchmarks.hardware.step_cost import Step, layer_matmuls

ROWS = (16, 32, 64, 128, 256, 512, 1024)  # the verify's rows: B · (K + 1) from B = 1, K = 15 to B = 64, K = 15
METHOD = ("jitted lax.fori_loop of n calls, each call's output the next one's input; jax.block_until_ready on the "
          "result; one warm-up loop after the compile; the median of `repeats` loops less the median of an empty "
          "loop, over the calls")


def layer_shapes(cfg: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, n_in, n_out) of a decoder layer's four matmuls at the model's widths (q/k/v and gate/up stacked)."""
    return [(m.name, m.n_in, m.n_out) for m in layer_matmuls(cfg, 1)]


def loop_seconds(body: Callable[[Any, Any], Any], x: Any, weights: Any, n: int, repeats: int) -> float:
    """Seconds of one call of body(x, weights) (`METHOD`): n calls chained in a jitted fori_loop, less a loop of
    none; the weights an argument of the loop (a closure would compile them in as constants)."""
    import jax  # lazy: jax
    import numpy as np  # lazy: numpy

    loop = jax.jit(lambda x, w, count: jax.lax.fori_loop(0, count, lambda _, y: body(y, w), x))

    def timed(count: int) -> float:
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x, weights, np.int32(count)))
        return time.perf_counter() - t0

    timed(n)  # compiles and warms up
    full, empty = [], []
    for _ in range(repeats):  # in turn, so that drift falls on both
        full.append(timed(n))
        empty.append(timed(0))
    return max((float(np.median(full)) - float(np.median(empty))) / n, 1e-12)


def peak_rate(dtype: Any, n: int, calls: int = 4, repeats: int = 5) -> dict[str, float]:
    """FLOP/s of an n x n x n matmul in `dtype` (float32 accumulation), the weights 1/n so the values stay finite."""
    import jax.numpy as jnp  # lazy: jax

    w = jnp.full((n, n), 1.0 / n, dtype)
    seconds = loop_seconds(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32).astype(dtype),
                           jnp.ones((n, n), dtype), w, calls, repeats)
    flops = 2.0 * n ** 3
    return {"n": n, "flops": flops, "seconds": seconds, "flops_per_s": flops / seconds}


def shape_rates(dtype: Any, n_in: int, n_out: int, copies: int, rows: Sequence[int], calls: int = 2,
                repeats: int = 5) -> dict[int, float]:
    """Seconds of one [r, n_in] x [n_in, n_out] matmul at each r of `rows`: a chain over `copies` weights, each its
    own array (a layer each, unrolled as the engine runs its layers), each output cut or tiled back to n_in columns
    as the next input."""
    import jax.numpy as jnp  # lazy: jax

    weights = [jnp.full((n_in, n_out), 1.0 / n_in, dtype) for _ in range(copies)]

    def layers(x: Any, ws: list[Any]) -> Any:
        for w in ws:
            y = jnp.dot(x, w, preferred_element_type=jnp.float32).astype(dtype)
            x = jnp.tile(y, (1, -(-n_in // n_out)))[:, :n_in]
        return x

    return {r: loop_seconds(layers, jnp.ones((r, n_in), dtype), weights, calls, repeats) / copies for r in rows}


def by_rows(measured: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """FLOP/s at each row count over every shape measured there: their FLOPs over their seconds."""
    flops: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for m in measured:
        flops[m["rows"]] = flops.get(m["rows"], 0.0) + m["flops"]
        seconds[m["rows"]] = seconds.get(m["rows"], 0.0) + m["seconds"]
    return {r: flops[r] / seconds[r] for r in sorted(flops)}


def at_rows(rates: Mapping[int, float], rows: int) -> float:
    """The rate at `rows`: linear in log2(rows) between the row counts measured, the nearest end's beyond them."""
    import numpy as np  # lazy: numpy

    ks = sorted(rates)
    return float(np.interp(math.log2(max(rows, 1)), [math.log2(k) for k in ks], [rates[k] for k in ks]))


def rate_lookup(measured: Sequence[Mapping[str, Any]]) -> Callable[[int, int, int], float]:
    """FLOP/s of a matmul (rows, n_in, n_out): its own shape's rates where that shape was measured, else the rates
    of every shape measured (a head or an embedding the layers do not have)."""
    shapes: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for m in measured:
        shapes.setdefault((m["n_in"], m["n_out"]), []).append(m)
    own = {shape: by_rows(ms) for shape, ms in shapes.items()}
    every = by_rows(measured)
    return lambda rows, n_in, n_out: at_rows(own.get((n_in, n_out), every), rows)


def practical_seconds(step: Step, bytes_per_s: float, rate: Callable[[int, int, int], float],
                      peak_flops_per_s: float) -> tuple[float, bool]:
    """(The step's time at the device's measured rates, whether a pass is compute-bound there): per pass
    max(bytes / stream rate, matmul FLOPs at the rate of their row count + attention FLOPs at the peak)."""
    total, compute = 0.0, False
    for p in step.passes:
        memory_s = p.bytes() / bytes_per_s
        flops_s = sum(m.flops() / rate(m.rows, m.n_in, m.n_out) for m in p.matmuls) \
            + p.attention_flops / peak_flops_per_s
        total += max(memory_s, flops_s)
        compute = compute or flops_s > memory_s
    return total, compute
