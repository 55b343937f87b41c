"""Dataset registry: offline sources, seeded subsets, the chat template, hashes, and a clear error offline."""
import hashlib
import json

import pytest
from transformers import AutoTokenizer

from benchmarks.core.datasets import DATASETS, DatasetUnavailable, load_prompts, subset_indices


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
