"""Model shapes (benchmarks.core.shapes): the named ones, the released drafts' layout, config.json read back."""
from __future__ import annotations

import pytest

from benchmarks.core.paths import ROOT
from benchmarks.core.shapes import HF_SHAPES, SHAPES, DraftConfig, ModelConfig, read_config, released_draft

TINY = ROOT / "models" / "tiny"


def test_every_published_checkpoint_names_a_shape():
    assert set(HF_SHAPES.values()) <= set(SHAPES)


def test_the_released_qwen3_4b_draft_taps_five_layers_of_the_targets_widths():
    target = SHAPES["qwen3-4b"]
    draft = released_draft(target)
    assert draft.target_layer_ids == (1, 9, 17, 25, 33)  # the released drafts' taps of 36 layers
    assert (draft.block_size, draft.mask_token_id, draft.layers.num_layers) == (16, 151669, 5)
    assert draft.layers.hidden_size == target.hidden_size and draft.layers.qk_norm
    tiny = released_draft(SHAPES["qwen3-tiny"], block_size=8)
    assert tiny.target_layer_ids == (1, 3)  # 6 layers: at most L-4 = 2 taps
    assert tiny.mask_token_id == SHAPES["qwen3-tiny"].vocab_size - 1


def test_the_tiny_checkpoints_config_json_reads_as_shapes():
    target = ModelConfig.from_hf(read_config(TINY / "target"))
    draft = DraftConfig.from_hf(read_config(TINY / "dflash"))
    assert (target.num_layers, target.tie_word_embeddings) == (6, True)
    assert (draft.layers.num_layers, draft.block_size, draft.target_layer_ids) == (2, 16, (1, 2, 3))
    assert draft.layers.hidden_size == target.hidden_size


def test_read_config_names_what_it_cannot_find(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="nor a downloadable HF id"):
        read_config(tmp_path / "absent")
