"""`study device`: the command of benchmarks/studies/device.py."""
from benchmarks.studies.device import add_cli_args, main

__all__ = ["add_cli_args", "main"]
