"""What an engine declares about the options a cell may set, as data that imports no engine library (so that
`validate` and `--plan` stay fast and work where the engine is not installed): their names, the defaults the engine
applies itself, the values an option may take where they are few (their type with them), and the int options'
ranges. Each engine declares one in its own folder (`jax/jax_options.py`, `vllm/vllm_options.py`,
`llamacpp/llamacpp_options.py`); its catalog row (`catalog.py`) points to it. And what an engine's check before a run
finds (`PreRun`), which its row points to likewise."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from benchmarks.core.cells import OptionValue

# A range's highest value that is the cell's context: an int option must stay below the cell's max_model_len.
CONTEXT = "context"


@dataclass(frozen=True)
class EngineOptions:
    """names     the option names a cell may set (called at validation: vLLM's depend on its installed release)
    defaults     option defaults the engine applies itself
    choices      the values an option may take, where they are few
    ranges       the int options and their range (lowest, highest); highest None for no bound of its own, or CONTEXT
                 for below the cell's max_model_len"""

    names: Callable[[], frozenset[str]]
    defaults: Mapping[str, OptionValue] = field(default_factory=dict)
    choices: Mapping[str, tuple[OptionValue, ...]] = field(default_factory=dict)
    ranges: Mapping[str, tuple[int, int | str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class PreRun:
    """What an engine's check before a run found, on this machine:
    problem     why none of its cells could run (the run stops before anything is written), or None
    builds      a line per build the run will start before its units, with its expected time
    checked     how its cells' options were checked (validate says it after "ok"), or None"""

    problem: str | None = None
    builds: tuple[str, ...] = ()
    checked: str | None = None
