"""llama.cpp: one `llama-server` per cell, built on demand at a pinned release, checkpoints converted to
GGUF; its options as data."""
