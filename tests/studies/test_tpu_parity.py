"""The tpu-inference parity study where tpu-inference is not installed: its command line, and its own loop against the
JAX engine."""

import pytest

from benchmarks.cli import main
from benchmarks.core.paths import ROOT


def test_without_tpu_inference_exits_2_naming_the_venv(monkeypatch, capsys):
    import benchmarks.studies.tpu_parity as mod

    monkeypatch.setattr(mod, "find_spec", lambda name: None)
    tiny = ROOT / "models" / "tiny"
    assert main(["study", "tpu-parity", "--target", str(tiny / "target"), "--draft", str(tiny / "dflash")]) == 2
    assert "TPU venv" in capsys.readouterr().err


def test_bad_checkpoint_folder_exits_2(tmp_path, capsys):
    assert main(["study", "tpu-parity", "--target", str(tmp_path), "--draft", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


@pytest.mark.jax
def test_the_studys_own_loop_agrees_with_the_engine_where_the_output_cuts_its_last_step(oracle_pair):
    """`make parity-tpu-inference` compares tpu-inference's draft along this loop; the loop must first be the
    engine's (float32): with every draft accepted, its last step runs past the output and is counted to its end."""
    import jax.numpy as jnp

    from benchmarks.engines.jax.decode import Decoder
    from benchmarks.engines.jax.loader import load_draft, load_target
    from benchmarks.studies.tpu_inference_draft import agrees, trajectory

    tcfg, tp = load_target(oracle_pair["target"], "float32")
    dcfg, dp = load_draft(oracle_pair["dflash"], "float32")
    prompt, new = [3, 1, 4, 1, 5], 2 * dcfg.block_size - 3  # the second step wants fewer tokens than it accepts
    engine = Decoder(tcfg, tp, len(prompt) + new + 1, jnp.float32, dcfg, dp, k=dcfg.block_size - 1).generate(
        prompt, new)
    out: list[int] = []
    accepted: list[int] = []
    for _ in trajectory(tcfg, tp, dcfg, dp, prompt, new, jnp.float32, out, accepted):
        pass
    assert accepted[-1] > engine.accept_lengths[-1]  # the loop's last step, uncut, ran past the output
    assert agrees(out, accepted, engine.tokens, engine.accept_lengths)
    assert not agrees(out, [a + 1 for a in accepted], engine.tokens, engine.accept_lengths)
