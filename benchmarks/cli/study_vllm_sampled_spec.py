"""`study vllm-sampled-spec`: the command of benchmarks/studies/vllm_sampled_spec.py."""
from benchmarks.studies.vllm_sampled_spec import add_cli_args, main

__all__ = ["add_cli_args", "main"]
