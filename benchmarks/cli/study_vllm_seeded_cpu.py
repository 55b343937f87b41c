"""`study vllm-seeded-cpu`: the command of benchmarks/studies/vllm_seeded_cpu.py."""
from benchmarks.studies.vllm_seeded_cpu import add_cli_args, main

__all__ = ["add_cli_args", "main"]
