"""JaxEngine: the standalone JAX runner behind the harness's Engine protocol (methods baseline, dflash and ddtree, a
DFlash draft's tree); its options (cell.engine_options) are declared in jax_options.py."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.core.cells import TREE_METHODS, Cell, int_option
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters, TokenScores
from benchmarks.core.metrics import drafted_within
from benchmarks.engines.jax.jax_options import DEFAULTS as OPTIONS
from benchmarks.hardware import detect, roofline


def resolve_checkpoint(name: str) -> Path:
    """A local folder, or an HF hub id already in the local cache."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download  # lazy: optional: huggingface_hub

        return Path(snapshot_download(name, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as err:
        raise FileNotFoundError(f"{name!r} is neither a checkpoint folder nor a downloadable HF id: {err}") from err


def eos_token_ids(path: Path) -> tuple[int, ...]:
    """EOS ids from generation_config.json and config.json (either may hold an int or a list)."""
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        f = path / name
        if f.exists():
            eos = json.loads(f.read_text()).get("eos_token_id")
            ids += [eos] if isinstance(eos, int) else list(eos or [])
    return tuple(dict.fromkeys(ids))


METHODS = ("baseline", "dflash", "ddtree")  # the methods this engine runs


class DecoderArgs(NamedTuple):
    """decode.Decoder's speculation arguments."""

    k: int
    num_queries: int | None
    budget: int


def decoder_args(cell: Cell, draft_queries: str) -> DecoderArgs:
    """A cell's speculation as decode.Decoder's arguments (k, num_queries, budget), after validating the method, its
    draft and the draft_queries option: a chain's K (its draft runs K + 1 queries under "k+1"), a tree's budget (its
    draft runs the whole block, its depth limit block_size - 1), nothing for the baseline."""
    if cell.method in ("eagle3", "ngram"):
        raise ValueError(f"the JAX engine runs {', '.join(METHODS)}; run {cell.method} with the vllm engine")
    if cell.method not in METHODS:
        raise ValueError(f"unknown method {cell.method!r}")
    if draft_queries not in ("block", "k+1"):
        raise ValueError("draft_queries must be 'block' or 'k+1'")
    if cell.method == "baseline":
        return DecoderArgs(0, None, 0)
    if not cell.draft:
        raise ValueError(f"method {cell.method} needs a draft checkpoint")
    if cell.method in TREE_METHODS:
        if draft_queries != "block":
            raise ValueError("a draft tree's draft runs the whole block: draft_queries must be 'block'")
        return DecoderArgs(0, None, cell.tree_budget)
    return DecoderArgs(cell.k, cell.k + 1 if draft_queries == "k+1" else None, 0)


# A GPU shared with vLLM (cells one after another in this process, each vLLM engine taking gpu_memory_utilization of
# the device): JAX allocates what it uses instead of 75 % of the device at start-up. Its pool keeps its peak until
# the process exits; XLA_PYTHON_CLIENT_MEM_FRACTION caps it. A value the user exported is kept (docs/sampling-check.md).
MEMORY_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


class JaxEngine:
    """The Engine protocol over decode.Decoder: one loaded (target[, draft], K or tree budget) at a time, a request at a
    time
    (`generate`) or a static batch of them (`generate_batch`, batch.BatchDecoder)."""

    name = "jax"

    def __init__(self) -> None:
        self.decoder: Any = None
        self.opts: dict[str, Any] = dict(OPTIONS)
        self.eos: tuple[int, ...] = ()
        self.hw: Any = None
        self.floor_applies = False
        self._within = SpecCounters()  # the requests' acceptance, each cut at its output (spec_counters)
        self._info: dict[str, Any] = {}
        self._batch: Any = None

    def load(self, cell: Cell) -> None:
        for key, value in MEMORY_ENV.items():  # read when JAX first initialises a device backend
            os.environ.setdefault(key, value)
        import jax  # lazy: jax
        import jax.numpy as jnp  # lazy: jax

        from benchmarks.engines.jax import model as M  # lazy: imports jax
        from benchmarks.engines.jax.decode import Decoder  # lazy: imports jax
        from benchmarks.engines.jax.loader import (  # lazy: imports jax, safetensors
            load_draft,
            load_target,
            resolve_dtype,
        )

        unknown = set(cell.engine_options) - set(OPTIONS)
        if unknown:
            raise ValueError(f"unknown JAX engine options {sorted(unknown)}; known: {sorted(OPTIONS)}")
        opts = {**OPTIONS, **cell.engine_options}
        args = decoder_args(cell, str(opts["draft_queries"]))
        if args.budget and opts["breakdown"]:
            raise ValueError("the breakdown option times DFlash's chain; a draft tree runs its steps on the device")

        t0 = time.perf_counter()
        target_path = resolve_checkpoint(cell.target)
        tcfg, tparams = load_target(target_path, str(opts["dtype"]))
        tcfg = M.with_attention(tcfg, str(opts["attention"]))
        dtype = resolve_dtype(str(opts["dtype"]), json.loads((target_path / "config.json").read_text()))
        M.full_precision(dtype)
        dcfg = dparams = None
        if cell.draft and cell.method != "baseline":
            dcfg, dparams = load_draft(resolve_checkpoint(cell.draft), jnp.dtype(dtype).name)
            if dcfg.layers.hidden_size != tcfg.hidden_size:
                raise ValueError(f"draft hidden size {dcfg.layers.hidden_size} != target's {tcfg.hidden_size}")
        self.decoder = Decoder(tcfg, tparams, int_option(opts, "max_model_len"), dtype, dcfg, dparams, *args)
        load_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        self.decoder.generate([0] * 4, 2, breakdown=bool(opts["breakdown"]))  # the smallest bucket and the step
        warmup_s = time.perf_counter() - t0

        self.opts, self._within, self._batch = opts, SpecCounters(), None
        self.eos = () if opts["ignore_eos"] else eos_token_ids(target_path)
        self.hw = detect.detect()
        weights = self.decoder.step_cost(0)
        self.floor_applies, why = self.hw.floor_applies(weights.bytes() + self.decoder.cache_bytes())
        floor_s = roofline.floor_seconds(weights, self.hw.bandwidth_bytes_per_s) if self.floor_applies else None
        self._info = {
            "engine": "jax", "jax_version": jax.__version__, "platform": self.hw.platform, "device": self.hw.device,
            "method": cell.method, "k": cell.k if dcfg else 0, "tree_budget": self.decoder.budget,
            "dtype": jnp.dtype(dtype).name,
            "matmul_precision": jax.config.jax_default_matmul_precision or "default",
            "max_model_len": self.decoder.max_model_len, "prefill_buckets": self.decoder.buckets,
            "weight_layout": tcfg.weight_layout, "attention": M.attention_of(tcfg),
            "draft_queries": self.decoder.num_queries if dcfg else None, "eos_token_ids": list(self.eos),
            "weight_bytes_per_step": weights.weight_bytes(), "bandwidth_bytes_per_s": self.hw.bandwidth_bytes_per_s,
            "bandwidth_source": self.hw.bandwidth_source, "step_floor_s": floor_s, "floor_note": why,
            "load_s": load_s, "warmup_s": warmup_s,
        }

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        if self.decoder is None:
            raise RuntimeError("load() a cell first")
        g = self.decoder.generate(prompt_ids, params.max_new_tokens, params.temperature, params.seed, self.eos,
                                  breakdown=bool(self.opts["breakdown"]))
        steps = len(g.accept_lengths) if g.accept_lengths is not None else len(g.tokens) - 1
        # a floor counts the KV rows the first step reads: every later step reads more
        cost = self.decoder.step_cost(self.decoder.span(len(prompt_ids)))
        floor_s = roofline.floor_seconds(cost, self.hw.bandwidth_bytes_per_s) if self.floor_applies else None
        extra: dict[str, Any] = {"compile_s": g.compile_s, "prefill_bucket": g.bucket, "decode_steps": steps,
                                 "host_round_trips": g.round_trips, "step_floor_s": floor_s,
                                 "step_bytes": cost.bytes(), "step_flops": cost.flops()}
        if steps > 0:
            step_s = (g.last_token_s - g.ttft_s) / steps
            extra |= {"step_s": step_s, "achieved_bytes_per_s": cost.bytes() / step_s}
            error = roofline.timing_error(step_s, floor_s) if floor_s else None
            if error:
                extra["timing_error"] = error
        extra |= g.breakdown | self._tree_extra(g.tree_paths)
        if g.accept_lengths is not None:
            self._count(g.accept_lengths, len(g.tokens))
        return RequestRecord(g.tokens, g.ttft_s, g.last_token_s, g.accept_lengths, extra)

    def generate_batch(self, prompts: list[list[int]],
                       params: SamplingParams | Sequence[SamplingParams]) -> list[RequestRecord]:
        """The prompts decoded together as one static batch (batch.BatchDecoder), with one SamplingParams for all or
        one each (one temperature): record i holds the tokens and accept lengths `generate(prompts[i], params[i])`
        gives, and the batch's times (its TTFT, and its end as every request's last token: docs/engine-findings.md).
        Its extra adds the batch's size and steps, the request's idle steps and the batch's wasted row-steps."""
        from benchmarks.engines.jax.batch import BatchDecoder  # lazy: imports jax

        if self.decoder is None:
            raise RuntimeError("load() a cell first")
        if self.opts["breakdown"]:
            raise ValueError("the breakdown option times one request at a time; a batch runs its steps on the device")
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(each) != len(prompts) or len({p.temperature for p in each}) > 1:
            raise ValueError("a batch takes one SamplingParams, or one per prompt with a single temperature")
        if self._batch is None:
            self._batch = BatchDecoder(self.decoder)
        g = self._batch.generate(prompts, [p.max_new_tokens for p in each], each[0].temperature,
                                 [p.seed for p in each], self.eos)
        batch = {"compile_s": g.compile_s, "prefill_bucket": g.bucket, "batch_size": len(prompts),
                 "batch_bucket": g.batch_size, "batch_steps": g.steps, "wasted_row_steps": g.wasted_row_steps,
                 "host_round_trips": g.round_trips}
        if g.steps:
            batch["batch_step_s"] = (g.last_token_s - g.ttft_s) / g.steps
        records = []
        for i, tokens in enumerate(g.tokens):
            accepts = g.accept_lengths[i] if g.accept_lengths is not None else None
            steps = len(accepts) if accepts is not None else len(tokens) - 1
            if accepts is not None:
                self._count(accepts, len(tokens))
            tree = self._tree_extra(g.tree_paths[i] if g.tree_paths is not None else None)
            records.append(RequestRecord(tokens, g.ttft_s, g.last_token_s, accepts,
                                         {**batch, "decode_steps": steps, "idle_steps": g.idle_steps[i], **tree}))
        return records

    def _tree_extra(self, paths: list[list[int]] | None) -> dict[str, Any]:
        """A draft tree's request record: per step (cut at the output as its accept lengths are), the rows verified
        (budget + 1) and the accepted path's pop-order node indices, root excluded (`tree_paths`), from which the
        analysis reads the path each smaller budget would have accepted."""
        if paths is None:
            return {}
        return {"tree_rows": [self.decoder.budget + 1] * len(paths), "tree_paths": paths}

    def _count(self, accepts: list[int], n_out: int) -> None:
        """Add a request's verify steps (accept lengths already cut at its n_out tokens) to the engine's counters: K
        drafted per step (a tree's depth limit), cut at the output by the same rule (metrics.drafted_within)."""
        k = self.decoder.k
        self._within += SpecCounters.from_accept_lengths(accepts, k, drafted_within(accepts, [k] * len(accepts), n_out))

    def spec_counters(self) -> SpecCounters | None:
        """The cumulative counters of the requests since load, each counted within its output (EOS or the limit)."""
        if self.decoder is None or not self.decoder.speculative:
            return None
        return self._within  # a new object after each +=, never changed in place

    samples_seeded = True  # sample_many honours its seeds

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]:
        """len(seeds) independent samples of one prompt (the distribution check's), decoded side by side by
        Decoder.sample_batch: sample i holds the tokens `generate` gives with seed seeds[i]. Untimed."""
        if self.decoder is None:
            raise RuntimeError("load() a cell first")
        return self.decoder.sample_batch(prompt_ids, params.max_new_tokens, params.temperature, seeds, self.eos)

    def score_many(self, prompt_ids: list[int], continuations: list[list[int]]) -> list[float]:
        """The loaded target's raw (temperature 1) log-likelihood of each continuation after the prompt, teacher-forced
        in the run's dtype (score.logliks; the distribution check's sequence statistic). Untimed, with scratch caches
        of its own: the live caches are left untouched."""
        from benchmarks.engines.jax.score import logliks  # lazy: imports jax

        if self.decoder is None:
            raise RuntimeError("load() a cell first")
        return logliks(self.decoder.tcfg, self.decoder.tparams, prompt_ids, continuations)

    def token_scores(self, prompt_ids: list[int], prefix_ids: list[int], token_ids: list[int],
                     top_n: int) -> TokenScores:
        """The target's logits for the token after prompt + prefix (the lossless check's tie test): one untimed
        teacher-forced prefill in the run's dtype, the live target cache as scratch (the next request's prefill
        rewrites it from row 0, as after warm-up). Returns the dtype, the top_n ids and logits (best first) and the
        logits of token_ids."""
        import jax  # lazy: jax
        import jax.numpy as jnp  # lazy: jax
        import numpy as np  # lazy: numpy

        from benchmarks.engines.jax import model as M  # lazy: imports jax

        d = self.decoder
        if d is None:
            raise RuntimeError("load() a cell first")
        seq = list(prompt_ids) + list(prefix_ids)
        if not 0 < len(seq) < d.max_model_len:
            raise ValueError(f"{len(seq)} tokens do not fit max_model_len={d.max_model_len}")
        tokens = np.zeros(next(b for b in d.buckets if b >= len(seq)), np.int32)
        tokens[:len(seq)] = seq
        logits, _, d.tcache = M.prefill(d.tparams, jnp.asarray(tokens), np.int32(len(seq)), d.tcache, cfg=d.tcfg)
        logits = np.asarray(jax.device_get(logits), np.float32)
        top = np.argsort(-logits, kind="stable")[:top_n]
        return TokenScores(self._info["dtype"], [int(i) for i in top], [float(logits[i]) for i in top],
                           [float(logits[t]) for t in token_ids])

    def describe(self) -> dict[str, Any]:
        return dict(self._info)

    def close(self) -> None:
        self.decoder = self._batch = None
        self._within = SpecCounters()
