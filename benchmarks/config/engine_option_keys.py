"""The parser of `engine_options`, and the max_model_len each engine of a matrix gets from them (what other keys'
parsers and the run plan check lengths against). Options are data (`benchmarks.engines.vllm.vllm_options`), so no engine
is imported."""
from __future__ import annotations

import difflib

from benchmarks.config.matrix_checks import Parsing, fail
from benchmarks.core.cells import CellOptions, OptionValue
from benchmarks.engines import catalog


def engine_options(p: Parsing) -> CellOptions:
    options = p.merged["engine_options"]
    for e in catalog.ENGINES:
        if not isinstance(options.get(e) or {}, dict):
            raise fail(p.source, "engine_options", f"'{e}' must be a mapping of {e}-only options")
    _check_engine_options(p.source, p.parsed["engine"], options)
    return options


def _check_engine_options(source: str, engines: list[str], options: CellOptions) -> None:
    """Each shared option must be one every engine of the matrix accepts, and each engine's sub-mapping its own
    (benchmarks.engines.vllm.vllm_options: data, so no engine is imported)."""
    shared = [key for key in options if key not in catalog.ENGINES]
    for e in engines:
        row = catalog.engine(e)
        known = row.options()
        own = [e, row.serves] if row.serves else [e]  # a server takes its engine's options too
        for key, where in [(k, "engine_options") for k in shared] + [(k, f"engine_options.{o}") for o in own
                                                                      for k in own_options(options, o)]:
            if key in known:
                value = (options if where == "engine_options" else own_options(options, where.split(".", 1)[1]))[key]
                allowed = row.choices.get(key)
                if allowed is not None and (isinstance(value, bool) != isinstance(allowed[0], bool)
                                            or value not in allowed):
                    raise fail(source, where, f"{key}: {value!r} is not a value the {e} engine takes; allowed: "
                                              f"{', '.join(map(str, allowed))}")
                if key in row.ranges:
                    _check_range(source, where, e, key, value, options)
                continue
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = (f"did you mean {', '.join(close)}?" if close
                    else f"{e} accepts {', '.join(sorted(known))}" if len(known) <= 12 else f"see {e}'s engine "
                    f"arguments")
            scope = (f"a shared option goes to every engine of the matrix ({', '.join(engines)}): put it under "
                     f"'engine_options: {{<engine>: {{{key}: ...}}}}' for the engine that takes it, or drop it; "
                     if where == "engine_options" else "")
            raise fail(source, where, f"{key!r} is not an option of the {e} engine; {scope}{hint}")


def _check_range(source: str, where: str, engine: str, key: str, value: OptionValue, options: CellOptions) -> None:
    """An int option within its declared range (`EngineRow.ranges`): an int, at least its lowest, at most its
    highest, or below the cell's max_model_len for an n-gram the context must hold."""
    low, high = catalog.engine(engine).ranges[key]
    context = engine_max_model_len(engine, options) if high == catalog.CONTEXT else None
    top = context - 1 if context is not None else high if isinstance(high, int) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (top is not None and value > top):
        span = f"an int from {low} to {top}" if top is not None else f"an int >= {low}"
        why = f" (below max_model_len {context}: the n-gram must fit the context)" if context is not None else ""
        raise fail(source, where, f"{key}: {value!r} is not a value the {engine} engine takes; expected {span}{why}")
    lookup = {**options, **own_options(options, engine)}
    least = lookup.get("prompt_lookup_min")
    if key == "prompt_lookup_max" and isinstance(least, int) and least > value:
        raise fail(source, where, f"prompt_lookup_max {value} is below prompt_lookup_min {least}: give a min <= max")


def own_options(options: CellOptions, engine: str | None) -> CellOptions:
    """A matrix's sub-mapping of `engine`'s own options (`vllm: {enforce_eager: true}`); {} where it has none."""
    value = options.get(engine) if engine else None
    return value if isinstance(value, dict) else {}


def engine_max_model_len(engine: str, options: CellOptions) -> int | None:
    """The max_model_len a cell of `engine` gets (its own options, the served engine's, the shared ones, the engine's
    default); None where the engine takes the model's own."""
    row = catalog.engine(engine)
    for scope in (own_options(options, engine), own_options(options, row.serves), options):
        if "max_model_len" in scope:
            value = scope["max_model_len"]
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    default = row.defaults.get("max_model_len")
    return default if isinstance(default, int) else None


def max_model_lens(engines: list[str], options: CellOptions) -> list[tuple[str, OptionValue]]:
    """Each max_model_len a matrix sets (shared, or an engine's own), with where it is set."""
    found = [("engine_options", options.get("max_model_len"))] + [
        (f"engine_options.{e}", own_options(options, e).get("max_model_len")) for e in engines]
    return [(where, value) for where, value in found if value is not None]
