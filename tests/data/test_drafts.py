"""The released drafts' training mode: a warning names a draft whose thinking mode the chat template contradicts."""
from benchmarks.data.drafts import RELEASED, released, thinking_warnings


def test_released_drafts_have_sources():
    assert all(d.source and d.draft.startswith("z-lab/") for d in RELEASED)
    assert released("z-lab/Qwen3-4B-DFlash-b16").thinking is False
    assert released("/models/Qwen3-8B-DFlash-b16/").draft == "z-lab/Qwen3-8B-DFlash-b16"  # a local folder of its name
    assert released("models/tiny/dflash") is None


def test_thinking_warnings_name_the_draft():
    qwen3 = {"dflash": "z-lab/Qwen3-4B-DFlash-b16"}
    assert thinking_warnings(qwen3, {"enable_thinking": False}) == []
    [line] = thinking_warnings(qwen3, {"enable_thinking": True})
    assert "z-lab/Qwen3-4B-DFlash-b16 was trained with thinking off" in line and "non-thinking" in line
    [line] = thinking_warnings({"dflash": "z-lab/Qwen3.5-35B-A3B-DFlash"}, {"enable_thinking": False})
    assert "trained with thinking on" in line and "z-lab/dflash#60" in line
    assert thinking_warnings({"dflash": "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"}, {"enable_thinking": True}) == []
