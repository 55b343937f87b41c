"""`study interleave-bias`: the command of benchmarks/studies/interleave_bias.py."""
from benchmarks.studies.interleave_bias import add_cli_args, main

__all__ = ["add_cli_args", "main"]
