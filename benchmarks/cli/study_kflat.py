"""`study kflat`: the command of benchmarks/studies/kflat.py."""
from benchmarks.studies.kflat import add_cli_args, main

__all__ = ["add_cli_args", "main"]
