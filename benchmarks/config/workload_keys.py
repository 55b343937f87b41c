"""The parsers of the workload keys: the serving load (concurrency and request rate, parsed together), context
lengths, turns, the chat template's arguments and static batch sizes."""
from __future__ import annotations

from typing import Any

from benchmarks.config.engine_option_keys import engine_max_model_len
from benchmarks.config.matrix_checks import Parsing, as_list, check_distinct, check_int, fail, got
from benchmarks.core.numbers import is_finite
from benchmarks.data.chat_template import DEFAULT_TEMPLATE
from benchmarks.data.dataset_registry import DATASETS, has_answers
from benchmarks.engines import catalog

TURNS = (1, 2)
# Arguments of `apply_chat_template` that the harness sets itself (or that are not keyword arguments of a template).
TEMPLATE_RESERVED = ("conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
                     "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
                     "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs")


def load(p: Parsing) -> tuple[list[int], float | None]:
    """The serving load axis, as (concurrency, request_rate): distinct concurrency levels (>= 1) and an optional
    request rate, only on engines that serve (a batch-1 engine takes the default concurrency [1] and no rate). A
    matrix with a capacity search (`slo`) measures fixed levels only where it gives `concurrency`: none by default."""
    if "slo" in p.merged and "concurrency" not in p.merged:
        if p.get("request_rate") is not None:
            raise fail(p.source, "request_rate", "a capacity search sets each load itself and would not use it; "
                                                 "drop it, or search over rates with slo_load: request_rate")
        return [], None
    source, levels = p.source, as_list(p.get("concurrency"))
    if not levels:
        raise fail(source, "concurrency", "empty; give an int >= 1 or a list of them")
    for c in levels:
        check_int(source, "concurrency", c, 1)
    if len(set(levels)) != len(levels):
        raise fail(source, "concurrency", f"lists a level twice: {levels}")
    rate = p.get("request_rate")
    if rate is not None and (not is_finite(rate) or not rate > 0):
        raise fail(source, "request_rate", f"expected a finite float > 0 (requests per second), got {got(rate)}; "
                                           f"omit it to send every request at once")
    batch = [e for e in p.parsed["engine"] if e in catalog.batch()]
    for key, used in (("concurrency", levels != [1]), ("request_rate", rate is not None)):
        if used and batch:
            raise fail(source, key, f"engine {', '.join(batch)} runs one prompt at a time and cannot serve a "
                                    f"load; use engine {' or '.join(catalog.serving())}, or drop '{key}' (a static "
                                    f"batch of a batch engine is 'batch_size')")
    return [int(c) for c in levels], None if rate is None else float(rate)


def _distinct_ints(p: Parsing, key: str, minimum: int) -> list[int] | None:
    """A key's int or list of distinct ints >= `minimum`; None where the matrix does not set it."""
    value = p.get(key)
    if value is None:
        return None
    values = as_list(value)
    if not values:
        raise fail(p.source, key, f"empty; give an int >= {minimum} or a list of them")
    for v in values:
        check_int(p.source, key, v, minimum)
    check_distinct(p.source, key, values)
    return values


def context_tokens(p: Parsing) -> list[int] | None:
    """The context lengths: distinct ints >= 0, on datasets with reference answers, each fitting every engine's
    max_model_len with max_new_tokens. None for 0 alone, the default written out (the run id stays as it was)."""
    source, values = p.source, _distinct_ints(p, "context_tokens", 0)
    if values is None or values == [0]:
        return None
    for d in p.parsed["datasets"]:
        if not has_answers(d.name, d.path):
            with_answers = sorted(n for n in DATASETS if has_answers(n, None))
            raise fail(source, "context_tokens", f"dataset {d.name!r} has no reference answers to build many-shot "
                                                 f"context from (a local file's rows carry none); datasets with "
                                                 f"them: {', '.join(with_answers)}")
    max_new_tokens = p.parsed["max_new_tokens"]
    for e in p.parsed["engine"]:
        limit = engine_max_model_len(e, p.parsed["engine_options"])
        if limit is not None and max(values) + max_new_tokens > limit:
            raise fail(source, "context_tokens",
                       f"{max(values)} context tokens + max_new_tokens {max_new_tokens} exceed max_model_len {limit} "
                       f"of engine {e}; the largest context that fits is {max(limit - max_new_tokens, 0)} tokens: "
                       f"lower it, or raise max_model_len (at most the target's max_position_embeddings)")
    return sorted(values)


def turns(p: Parsing) -> list[int] | None:
    """The turns to measure: distinct values of TURNS; turn 2 only on two-turn datasets, with a baseline to write the
    first answers, and not with a context axis. None for turn 1 alone, the default written out (the run id stays as
    it was)."""
    source, value = p.source, p.get("turns")
    if value is None:
        return None
    values = as_list(value)
    if not values or any(isinstance(t, bool) or t not in TURNS for t in values):
        raise fail(source, "turns", f"expected {TURNS[0]}, {TURNS[1]} or a list of them, got {value!r}")
    check_distinct(source, "turns", values)
    if values == [1]:
        return None
    if 2 in values:
        two_turn = sorted(n for n, spec in DATASETS.items() if spec.second_turn)
        for d in p.parsed["datasets"]:
            if d.path is not None or d.name not in DATASETS or DATASETS[d.name].second_turn is None:
                raise fail(source, "turns", f"dataset {d.name!r} has no second turn (two-turn datasets: "
                                            f"{', '.join(two_turn)}); measure it in a matrix of its own")
        if "baseline" not in p.parsed["methods"]:
            raise fail(source, "turns", "turn 2 continues the first answer, which the baseline cell generates: add "
                                        "'baseline' to 'methods'")
        if p.parsed["context_tokens"] is not None:
            raise fail(source, "turns", "turn 2 and 'context_tokens' do not combine; give them in separate matrices")
    return sorted(values)


def chat_template(p: Parsing) -> dict[str, Any] | None:
    """The chat template's keyword arguments: a mapping of names, none that the harness sets itself. The arguments
    that repeat DEFAULT_TEMPLATE are dropped, and None is left when nothing else remains: the default written out
    renders the same prompts, so the run id stays as it was."""
    value = p.get("chat_template")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise fail(p.source, "chat_template", f"expected a mapping of keyword arguments such as "
                                              f"{{enable_thinking: true}}, got {value!r}")
    reserved = sorted(set(value) & set(TEMPLATE_RESERVED))
    if reserved:
        raise fail(p.source, "chat_template", f"{', '.join(reserved)}: set by the harness, not a template argument")
    own = {k: v for k, v in value.items() if k not in DEFAULT_TEMPLATE or DEFAULT_TEMPLATE[k] != v
           or isinstance(v, bool) != isinstance(DEFAULT_TEMPLATE[k], bool)}
    return own or None


def batch_size(p: Parsing) -> list[int] | None:
    """The static batch sizes: distinct ints >= 1, each within every engine's own limit and the measured prompts, on
    engines that batch only (a server's load is its concurrency), and not beside a vLLM max_num_seqs of the matrix's
    own (the batch size sets it). None for batch size 1 alone, given or not (the run id stays as it was)."""
    source, sizes = p.source, _distinct_ints(p, "batch_size", 1)
    if sizes is None:
        return None
    if sizes == [1]:
        return None
    engines, top = p.parsed["engine"], max(sizes)
    served = [e for e in engines if e in catalog.serving()]
    if served:
        raise fail(source, "batch_size", f"engine {', '.join(served)} serves a load: its requests in flight are "
                                         f"'concurrency', not a static batch; drop 'batch_size', or measure the batch "
                                         f"engines ({', '.join(catalog.batching())}) in a matrix of their own")
    unable = [e for e in engines if e not in catalog.batching()]
    if unable:
        raise fail(source, "batch_size", f"engine {', '.join(unable)} decodes one prompt at a time; engines that "
                                         f"batch: {', '.join(catalog.batching())}")
    for e in engines:
        limit = catalog.engine(e).largest_batch()
        if limit is not None and top > limit:
            raise fail(source, "batch_size", f"{top} exceeds the {e} engine's largest batch, {limit}; give "
                                             f"batch sizes of at most {limit}")
    if top > p.parsed["num_prompts"]:
        raise fail(source, "batch_size", f"a batch of {top} needs at least {top} measured prompts, and num_prompts "
                                         f"is {p.parsed['num_prompts']}; raise num_prompts or lower the batch size")
    for where, options in [("engine_options", p.parsed["engine_options"])] + [
            (f"engine_options.{e}", p.parsed["engine_options"].get(e) or {}) for e in engines]:
        if "max_num_seqs" in options:
            raise fail(source, where, "max_num_seqs: set by 'batch_size' (each batch size's vLLM engine gets "
                                      "max_num_seqs = B); drop it")
    return sorted(int(b) for b in sizes)
