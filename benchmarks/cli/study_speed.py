"""`study speed`: the command of benchmarks/studies/speed.py."""
from benchmarks.studies.speed import add_cli_args, main

__all__ = ["add_cli_args", "main"]
