"""Dataset registry: offline sources, seeded subsets, the chat template and its keyword arguments, hashes, a clear
error offline, local rows in three forms, many-shot context and second turns."""
import copy
import dataclasses
import hashlib
import json
import os
import re

import pytest
from transformers import AutoTokenizer

from benchmarks.data.datasets import (
    DATASETS,
    DatasetUnavailable,
    Shots,
    load_prompts,
    load_rows,
    render,
    second_turn,
    select_prompts,
    sent_text,
    subset_indices,
    template_ignores,
    template_kwargs,
    tokens,
    with_context,
)
from tests.machine import mt_bench


@pytest.fixture(scope="module")
def tokenizer(random_pair):
    return AutoTokenizer.from_pretrained(random_pair["target"])


def test_registry_has_the_nine_datasets():
    assert set(DATASETS) == {"gsm8k", "math500", "aime24", "aime25", "humaneval", "mbpp", "swe-bench", "mt-bench",
                             "alpaca"}


def test_seeded_subsets_are_prefix_stable():
    assert subset_indices(100, 4, seed=3) == subset_indices(100, 8, seed=3)[:4]
    assert subset_indices(100, 8, seed=3) != subset_indices(100, 8, seed=4)


def test_humaneval_offline_with_chat_template(tokenizer):
    ps = load_prompts("humaneval", 3, seed=0, tokenizer=tokenizer)
    assert len(ps) == 3 and len({p.index for p in ps}) == 3
    rendered = tokenizer.decode(ps[0].ids)
    assert rendered.startswith("<|im_start|>user\nWrite a solution") and rendered.endswith("<|im_start|>assistant\n")
    assert "```python" in ps[0].text
    assert ps[0].sha256 == hashlib.sha256(json.dumps(ps[0].ids).encode()).hexdigest()
    assert [p.sha256 for p in load_prompts("humaneval", 3, seed=0, tokenizer=tokenizer)] == [p.sha256 for p in ps]


@mt_bench
def test_mt_bench_offline_first_turn(tokenizer):
    ps = load_prompts("mt-bench", 2, seed=0, tokenizer=tokenizer)
    assert len(ps) == 2 and all(len(p.text) > 20 for p in ps)


def test_local_jsonl(tmp_path, tokenizer):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "hello there"}) + "\n" + json.dumps({"prompt": "bye"}) + "\n")
    ps = load_prompts("mine", 2, seed=0, tokenizer=tokenizer, path=str(f))
    assert sorted(p.text for p in ps) == ["bye", "hello there"]
    with pytest.raises(DatasetUnavailable, match="does not exist"):
        load_prompts("mine", 1, 0, tokenizer, path=str(tmp_path / "absent.jsonl"))


def test_too_few_prompts_that_fit(tokenizer):
    with pytest.raises(DatasetUnavailable, match="only 0 of 164 rows fit"):
        load_prompts("humaneval", 2, 0, tokenizer, max_prompt_tokens=5)


def test_hub_dataset_offline_fails_clearly_and_never_substitutes(tokenizer, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetUnavailable) as err:
        load_prompts("gsm8k", 2, 0, tokenizer)
    msg = str(err.value)
    assert "openai/gsm8k" in msg and "humaneval" in msg and "mt-bench" in msg and "JSONL" in msg


def _write(path, lines):
    path.write_bytes(b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
                              for line in lines))
    return path


def test_local_rows_in_three_forms(tmp_path, tokenizer):
    f = _write(tmp_path / "p.jsonl", [
        {"prompt": "hello there"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now?"}]},
        {"prompt_ids": [5, 6, 7, 8]},
    ])
    ps = {p.construction["form"]: p for p in select_prompts("mine", 3, 0, tokenizer, str(f)).prompts}
    assert set(ps) == {"prompt", "messages", "prompt_ids"}
    assert ps["prompt_ids"].ids == [5, 6, 7, 8] and ps["prompt_ids"].rendered is None
    assert ps["prompt_ids"].sha256 == hashlib.sha256(json.dumps([5, 6, 7, 8]).encode()).hexdigest()
    chat = tokenizer.decode(ps["messages"].ids)
    assert chat.startswith("<|im_start|>system\nBe brief.")
    assert chat.endswith("and now?<|im_end|>\n<|im_start|>assistant\n")
    assert ps["messages"].text == "and now?" and ps["messages"].ids == tokens(ps["messages"].rendered, tokenizer)
    assert sent_text(ps["prompt_ids"], tokenizer) == tokenizer.decode([5, 6, 7, 8])


def test_bad_rows_of_each_form_are_named_by_line(tmp_path, tokenizer):
    vocab = len(tokenizer)
    f = _write(tmp_path / "bad.jsonl", [
        {"prompt": "fine"},
        {"prompt": "a", "prompt_ids": [1]},
        {"messages": "hi"},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "robot", "content": "q"}]},
        {"prompt_ids": [1, "two"]},
        {"prompt_ids": [1, vocab]},
        {"prompt_ids": []},
        b"\xff\xfe not utf-8",
        b"{not json",
        [1, 2],
    ])
    with pytest.raises(DatasetUnavailable) as err:
        select_prompts("mine", 1, 0, tokenizer, str(f))
    lines = str(err.value).splitlines()
    assert [line.split(":")[1] for line in lines] == [str(n) for n in range(2, 12)]
    for fragment in ("gives 'prompt' and 'prompt_ids'", "'messages' must be a non-empty list",
                     "ends with a message of role 'assistant'", "role 'robot' is not one of",
                     "prompt_ids[1] = 'two' is not a token id",
                     f"prompt_ids[1] = {vocab} is outside the tokenizer's vocabulary (ids 0..{vocab - 1})",
                     "'prompt_ids' must be a non-empty list", "not UTF-8", "not a JSON line", "got a JSON list"):
        assert any(fragment in line for line in lines), fragment


def test_a_chat_the_template_cannot_render_is_refused(tmp_path, tokenizer):
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system "
                            "role') }}{% endif %}{{ m['content'] }}{% endfor %}")
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    f = _write(tmp_path / "p.jsonl", [{"messages": chat}])
    with pytest.raises(DatasetUnavailable, match=r"p.jsonl:1: the target's chat template cannot render it: .*no sys"):
        select_prompts("mine", 1, 0, strict, str(f))


def test_chat_template_keyword_arguments(tokenizer):
    thinking = copy.deepcopy(tokenizer)
    thinking.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                              "{% if enable_thinking %}<think>{% else %}<nothink>{% endif %}")
    assert render("q", thinking).endswith("<nothink>")  # the default: thinking off
    assert render("q", thinking, {"enable_thinking": True}).endswith("<think>")
    assert template_ignores(thinking, {"enable_thinking": True}) == []
    assert template_ignores(tokenizer, {"enable_thinking": True}) == ["enable_thinking"]  # ChatML without thinking
    assert template_kwargs({"enable_thinking": True, "x": 1}) == {"enable_thinking": True, "x": 1}


def test_many_shot_context(tokenizer):
    chosen = select_prompts("humaneval", 3, 0, tokenizer)
    first = chosen.prompts
    pool = Shots("humaneval", chosen.rows, tokenizer, None)
    assert len(pool.rows) == 164
    for p in first:
        short, long = (with_context(p, pool, n, 1800, 0, tokenizer, None) for n in (600, 1200))
        for q, n in ((short, 600), (long, 1200)):
            assert n <= len(q.ids) <= 1800 and q.context_tokens == n and q.key == f"humaneval@ctx{n}"
            assert q.construction["context_tokens"] == len(q.ids) - len(p.ids) and q.ids[-len(p.ids):] != []
            assert tokenizer.decode(q.ids).endswith(tokenizer.decode(p.ids)[len("<|im_start|>"):])  # question last
            assert q.sha256 == hashlib.sha256(json.dumps(q.ids).encode()).hexdigest()
        rows = long.construction["shot_rows"]
        assert p.index not in rows  # never its own answer
        assert short.construction["shot_rows"] == rows[:len(short.construction["shot_rows"])]  # same order, prefix
        first_shot = chosen.rows[rows[0]]
        assert tokenizer.decode(long.ids).startswith(f"<|im_start|>user\n{DATASETS['humaneval'].render(first_shot)}")
        assert first_shot["canonical_solution"].strip()[:30] in tokenizer.decode(long.ids)  # its real solution
        assert with_context(p, pool, 1200, 1800, 0, tokenizer, None) == long  # deterministic
    assert with_context(first[0], pool, 1200, 1100, 0, tokenizer, None) is None  # cannot fit the limit
    orders = {tuple(with_context(p, pool, 1200, 1800, 0, tokenizer, None).construction["shot_rows"]) for p in first}
    assert len(orders) == len(first)  # each prompt its own shots: no shared cached prefix


@mt_bench
def test_second_turn_conversation(tokenizer):
    p = dataclasses.replace(load_prompts("mt-bench", 1, 0, tokenizer)[0], turn=1, follow_up="And a second question?")
    answer = tokens("A first answer.", tokenizer)
    q = second_turn(p, answer, tokenizer, None)
    text = tokenizer.decode(q.ids)
    assert text.startswith(tokenizer.decode(p.ids)[:-len("<|im_start|>assistant\n")])
    assert "<|im_start|>assistant\nA first answer.<|im_end|>" in text
    assert text.endswith("And a second question?<|im_end|>\n<|im_start|>assistant\n")
    assert q.turn == 2 and q.key == "mt-bench@turn2" and q.construction["first_prompt_sha256"] == p.sha256


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.mkdir(), "is a folder, not a file"),
    (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not a file"),  # never opened: a read would wait for a writer
    (lambda p: p.symlink_to("/dev/zero"), "is a device (a link to /dev/zero), not a file"),
    (lambda p: p.symlink_to(p.parent / "gone.jsonl"), "which does not exist"),
])
def test_a_prompt_file_that_is_not_a_file_is_named_for_what_it_is(make, fragment, tmp_path, tokenizer):
    path = tmp_path / "p.jsonl"
    make(path)
    with pytest.raises(DatasetUnavailable, match=re.escape(fragment)):
        select_prompts("mine", 1, 0, tokenizer, str(path))


def test_a_repeated_prompt_is_refused_naming_both_lines(tmp_path, tokenizer):
    f = _write(tmp_path / "p.jsonl", [{"prompt": "same"}, {"prompt": "other"}, {"prompt": "same"},
                                      {"messages": [{"role": "user", "content": "other"}]}])
    with pytest.raises(DatasetUnavailable) as err:
        select_prompts("mine", 2, 0, tokenizer, str(f))
    assert str(err.value).splitlines() == [
        f"{f}:3: the same prompt as line 1; a repeat is not a distinct input (docs/matrices.md, 'Your own prompts'): "
        f"remove it",
        f"{f}:4: the same prompt as line 2; a repeat is not a distinct input (docs/matrices.md, 'Your own prompts'): "
        f"remove it"]


def test_rows_that_render_to_the_same_ids_are_refused(tmp_path, tokenizer):
    ids = tokens(render("hello", tokenizer), tokenizer)
    f = _write(tmp_path / "p.jsonl", [{"prompt": "hello"}, {"prompt_ids": ids}, {"prompt": "bye"}])
    with pytest.raises(DatasetUnavailable, match="rows 1 and 2 .* render to the same token ids"):
        select_prompts("mine", 3, 0, tokenizer, str(f))


def test_a_lone_surrogate_is_named_by_its_line(tmp_path, tokenizer):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": "bad \\ud800 x"}\n'
                 '{"messages": [{"role": "user", "content": "\\udfff"}]}\n')
    with pytest.raises(DatasetUnavailable) as err:
        select_prompts("mine", 1, 0, tokenizer, str(f))
    assert [line.split(": ", 1)[0] for line in str(err.value).splitlines()] == [f"{f}:2", f"{f}:3"]
    assert "lone surrogate '\\ud800' at character 4" in str(err.value)


@pytest.mark.parametrize("row, where, token", [
    ({"prompt": "Say hi.<|im_end|>\n<|im_start|>assistant\nHello"}, "the prompt", "<|im_start|>"),
    ({"prompt": "a <|endoftext|> b"}, "the prompt", "<|endoftext|>"),
    ({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x<|im_end|>"}]},
     "messages[1]", "<|im_end|>"),
])
def test_control_tokens_typed_in_a_prompts_text_are_refused(tmp_path, tokenizer, row, where, token):
    f = _write(tmp_path / "ctl.jsonl", [{"prompt": "a plain row"}, row])
    with pytest.raises(DatasetUnavailable) as err:
        load_rows("mine", str(f), tokenizer)
    assert err.value.problems == [f"{f}:2: {where} holds the control token {token!r} of the target's tokenizer as "
                                  f"text, which would be encoded as that token, not as its characters; remove it "
                                  f"(give 'prompt_ids' to send control tokens on purpose)"]
    # what only looks like one is text, and control token ids given on purpose are sent as they are
    ids = tokenizer.convert_tokens_to_ids(["<|im_start|>"])
    fine = _write(tmp_path / "fine.jsonl", [{"prompt": "a <|im_start| b <im_end>"}, {"prompt_ids": ids + [5, 6]}])
    assert len(load_rows("mine", str(fine), tokenizer)) == 2
