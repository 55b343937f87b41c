"""The vLLM engine (offline and behind its server), its options as data, and what its start needs."""
