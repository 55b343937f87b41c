"""DFlash speculative-decoding benchmark harness."""
