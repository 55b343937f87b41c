"""The tpu-inference parity study's command line, where tpu-inference is not installed."""

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
