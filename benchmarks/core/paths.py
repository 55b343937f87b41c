"""Where the repository's files are: every path the harness derives from its own location, defined once."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = ROOT / "configs"
PRESETS_DIR = CONFIGS_DIR / "presets"
MATRICES_DIR = CONFIGS_DIR / "matrices"
CACHE_DIR = ROOT / ".cache"
REFERENCE_DIR = ROOT / "results" / "reference"
FIGURES_DIR = ROOT / "results" / "figures"
# Where run folders go by default; DFLASH_RUNS_DIR moves them (the test suite points it at a temporary folder).
RUNS_DIR = Path(os.environ.get("DFLASH_RUNS_DIR") or ROOT / "results" / "runs")


def resolve_model_ref(ref: str) -> str:
    """A local folder (relative to the repo root or absolute) if one exists, else the string as an HF id."""
    for candidate in (ROOT / ref, Path(ref).expanduser()):
        if candidate.is_dir():
            return str(candidate.resolve())
    return ref
