"""`study parity`: the command of benchmarks/studies/parity.py."""
from benchmarks.studies.parity import add_cli_args, main

__all__ = ["add_cli_args", "main"]
