"""`study tpu-parity`: the command of benchmarks/studies/tpu_parity.py."""
from benchmarks.studies.tpu_parity import add_cli_args, main

__all__ = ["add_cli_args", "main"]
