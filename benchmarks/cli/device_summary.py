"""`device summary`: the command of benchmarks/studies/device_summary.py."""
from benchmarks.studies.device_summary import add_cli_args, main

__all__ = ["add_cli_args", "main"]
