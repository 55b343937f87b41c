"""`study engine-ties`: the command of benchmarks/studies/engine_ties.py."""
from benchmarks.studies.engine_ties import add_cli_args, main

__all__ = ["add_cli_args", "main"]
