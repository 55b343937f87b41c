"""What a run reads besides its matrix: the datasets and their prompts, workloads built on them, the released
drafts, the published numbers and the tiny checkpoints."""
