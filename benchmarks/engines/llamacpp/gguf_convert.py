"""Runs llama.cpp's own `convert_hf_to_gguf.py` in this interpreter (`python -m benchmarks.engines.llamacpp.gguf_convert
SOURCE [--pre NAME] -- CONVERTER ARGS`), started by benchmarks/engines/llamacpp/llamacpp_gguf.py.

The converter names a BPE tokenizer's pre-tokenizer by hashing the ids it makes of a fixed text and stops on a hash
it does not know. `--pre NAME` writes NAME in that case instead (the caller gives it only for a tokenizer whose
pre-tokenizer it has read and knows llama.cpp implements under that name); a known hash keeps the converter's answer.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

FALLBACK_MARK = "gguf_convert: pre-tokenizer hash not known to the converter"  # read by llamacpp_gguf


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="gguf_convert")
    ap.add_argument("source", type=Path, help="the folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/")
    ap.add_argument("--pre", help="the pre-tokenizer name to write when the converter does not know the tokenizer")
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    sys.path[:0] = [str(args.source), str(args.source / "gguf-py")]
    from conversion import base  # lazy: conversion

    if args.pre:
        known = base.TextModel.get_vocab_base_pre

        def pre_or_fallback(self, tokenizer) -> str:
            try:
                return known(self, tokenizer)
            except NotImplementedError:
                print(f"{FALLBACK_MARK}; writing {args.pre!r}")
                return args.pre

        base.TextModel.get_vocab_base_pre = pre_or_fallback
    import convert_hf_to_gguf  # lazy: convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", *argv[cut + 1:]]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main(sys.argv[1:])
