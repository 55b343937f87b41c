"""Checkpoints as GGUF files for llama-server, converted on demand with the pinned release's own converter and cached
by the checkpoint's content hash, the output type and the release.

The converter runs on this interpreter (the project's transformers; the converter's own pinned transformers cannot read
the tiny tokenizer) through benchmarks/engines/llamacpp/gguf_convert.py. A draft is converted with `--target-model-dir`
(the DFlash and EAGLE-3 drafts take the target's tokenizer and config). Each GGUF's sha256 is kept beside it
(`gguf.json`) for the provenance.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from benchmarks.engines.llamacpp.gguf_convert import FALLBACK_MARK
from benchmarks.engines.llamacpp.llamacpp_build import PIN, BuildUnavailable, cache_root, ensure_source, locked
from benchmarks.hardware.provenance import content_sha256

# The converter's --outtype of each dtype a cell may ask for ("auto": the converter picks a 16-bit type).
OUTTYPES = {"auto": "auto", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# llama.cpp's name for the GPT-2 pre-tokenizer: byte-level BPE split by GPT-2's regex, no normaliser.
GPT2_PRE = "gpt-2"


class GgufStamp(TypedDict):
    """A GGUF's gguf.json: the checkpoint it was converted from and its content hash, the output type, the target
    whose tokenizer a draft took, the release, the file's sha256, whether the GPT-2 pre-tokenizer was the fallback."""

    source: str
    source_sha256: str
    outtype: str
    target: str | None
    release: str
    sha256: str
    pre_tokenizer_fallback: bool


@dataclass(frozen=True)
class Gguf:
    path: Path
    sha256: str
    source: str  # the checkpoint folder it was converted from
    source_sha256: str
    outtype: str


def fallback_pre(model_dir: Path) -> str | None:
    """The pre-tokenizer name to write when the converter does not know the tokenizer's hash: `gpt-2` for a byte-level
    BPE with GPT-2's regex, no prefix space and no normaliser (what llama.cpp's gpt-2 pre-tokenizer does); else None
    (the converter's own error stands)."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    tok = json.loads(path.read_text())
    pre = tok.get("pre_tokenizer") or {}
    if (tok.get("model", {}).get("type") == "BPE" and tok.get("normalizer") is None and pre.get("type") == "ByteLevel"
            and pre.get("use_regex", True) and not pre.get("add_prefix_space", False)):
        return GPT2_PRE
    return None


def convert_command(source: Path, model_dir: Path, outfile: Path, outtype: str,
                    target_dir: Path | None = None) -> list[str]:
    """The converter's command line on this interpreter: the checkpoint, the output file and type, the target's folder
    for a draft, and the pre-tokenizer fallback of the tokenizer it reads (the target's, for a draft)."""
    pre = fallback_pre(target_dir or model_dir)
    return [sys.executable, "-m", "benchmarks.engines.llamacpp.gguf_convert", str(source),
            *(["--pre", pre] if pre else []), "--", str(model_dir), "--outfile", str(outfile), "--outtype", outtype,
            *(["--target-model-dir", str(target_dir)] if target_dir else [])]


def gguf_key(model_sha256: str, outtype: str, target_sha256: str | None) -> str:
    blob = json.dumps({"model": model_sha256, "outtype": outtype, "target": target_sha256, "release": PIN})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def ensure_gguf(model_dir: Path, dtype: str = "float32", target_dir: Path | None = None, log=print) -> Gguf:
    """The cached GGUF of a checkpoint (a draft with its target), converted first when absent."""
    if dtype not in OUTTYPES:
        raise ValueError(f"dtype {dtype!r}: llama.cpp converts to {', '.join(OUTTYPES)}")
    outtype = OUTTYPES[dtype]
    model_sha = content_sha256(model_dir)
    key = gguf_key(model_sha, outtype, content_sha256(target_dir) if target_dir else None)
    folder = cache_root() / "gguf" / key
    stamp = folder / "gguf.json"
    with locked(cache_root() / "gguf" / f".lock-{key}"):
        if not stamp.is_file():
            source = ensure_source(log)
            log(f"llama.cpp: converting {model_dir} to GGUF ({outtype})")
            with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
                staging = Path(tmp) / key
                staging.mkdir()
                out = staging / "model.gguf"
                done = subprocess.run(convert_command(source, model_dir, out, outtype, target_dir),
                                      capture_output=True, text=True)
                if done.returncode != 0 or not out.is_file():
                    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
                    raise BuildUnavailable(f"llama.cpp: converting {model_dir} failed:\n{tail}")
                info: GgufStamp = {"source": str(model_dir), "source_sha256": model_sha, "outtype": outtype,
                                   "target": str(target_dir) if target_dir else None, "release": PIN,
                                   "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
                                   "pre_tokenizer_fallback": FALLBACK_MARK in done.stdout + done.stderr}
                (staging / "gguf.json").write_text(json.dumps(info, indent=2) + "\n")
                staging.rename(folder)
        info = json.loads(stamp.read_text())
    return Gguf(folder / "model.gguf", info["sha256"], info["source"], info["source_sha256"], info["outtype"])
