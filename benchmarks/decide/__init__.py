"""The decision rules a matrix names, pure: a latency target and its verdicts, the capacity search, a K
schedule per batch size."""
