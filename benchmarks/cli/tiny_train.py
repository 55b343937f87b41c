"""`tiny train`: the command of benchmarks/tiny/train.py."""
from benchmarks.tiny.train import add_cli_args, main

__all__ = ["add_cli_args", "main"]
