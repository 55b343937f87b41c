"""Loading and parsing a matrix (its preset merged in): one parser per key or group of keys, run in the order of
`PARSERS`, each raising one ConfigError that names the file, the key and what is allowed. The keys, their parsers
and the order they run in are declared in `benchmarks.config.matrix_schema`; the parsers live in
`benchmarks.config.run_keys`, `engine_option_keys`, `workload_keys` and `placement_keys`."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from benchmarks.config.matrix_checks import ConfigError, Parsing, check_name, fail
from benchmarks.config.matrix_schema import KEYS, MATRIX_KEYS, PARSERS, PRESET_KEYS, Matrix
from benchmarks.config.yaml_files import read_yaml
from benchmarks.core.guarded import file_problem
from benchmarks.core.paths import PRESETS_DIR
from benchmarks.engines import catalog


def load_preset(name: str) -> dict[str, Any]:
    """The keys of configs/presets/<name>.yaml, each one a preset may give."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise ConfigError(f"preset {name!r} not found in {PRESETS_DIR}; known presets: {', '.join(known)}")
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a mapping of keys ({', '.join(PRESET_KEYS)})")
    for key in data:
        if key not in PRESET_KEYS:
            raise fail(str(path), key, f"unknown key; allowed: {', '.join(PRESET_KEYS)}")
    return data


MAX_MATRIX_BYTES = 4 << 20  # a matrix file: the shipped ones are a few kB


def load_matrix(path: str | Path, vllm_absent: str | None = None) -> Matrix:
    """The matrix of a YAML file, validated (`parse_matrix`, `vllm_absent` passed on); a path that is not a file is
    named for what it is (`guarded.file_problem`)."""
    path = Path(path)
    problem = file_problem(path, MAX_MATRIX_BYTES)
    if problem == "does not exist":
        raise ConfigError(f"{path}: no such matrix file; the shipped ones are in configs/matrices/")
    if problem:
        raise ConfigError(f"{path} {problem}; give a matrix file (the shipped ones are in configs/matrices/)")
    return parse_matrix(read_yaml(path), str(path), path.parent, vllm_absent)


def _merge(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The matrix's keys over its preset's (engine options merged per engine, drafts per method)."""
    preset = load_preset(check_name(source, "preset", raw["preset"])) if raw.get("preset") else {}
    for key in ("engine_options", "drafts"):
        if not isinstance(raw.get(key) or {}, dict):
            raise fail(source, key, "expected a mapping")
    preset_options, own_options = preset.get("engine_options", {}), raw.get("engine_options") or {}
    merged_options = {**preset_options, **own_options}
    for e in catalog.ENGINES:
        if isinstance(preset_options.get(e), dict) and isinstance(own_options.get(e), dict):
            merged_options[e] = {**preset_options[e], **own_options[e]}
    merged = {**{k: v for k, v in preset.items() if k != "description"}, **raw, "engine_options": merged_options}
    merged["drafts"] = {**preset.get("drafts", {}), **(raw.get("drafts") or {})}
    return merged


def parse_matrix(raw: Any, source: str = "<matrix>", base_dir: Path | None = None,
                 vllm_absent: str | None = None) -> Matrix:
    """Validate a matrix mapping (after merging its preset) and return it resolved; relative prompt file paths are
    resolved from `base_dir` (the matrix file's folder), else from the working directory. `vllm_absent`: why vLLM
    cannot run where the matrix is to run (`catalog.vllm_absence()`, which the commands that run or check a matrix
    here pass): a matrix that names no engine then takes the JAX engine, and one that names an engine needing vLLM
    is refused with the reason. None (the default) parses the same everywhere: the default engine is vLLM."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a matrix must be a mapping of keys ({', '.join(MATRIX_KEYS)})")
    for key in raw:
        if key not in MATRIX_KEYS:
            close = difflib.get_close_matches(str(key), list(MATRIX_KEYS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise fail(source, key, f"unknown key; {hint}allowed: {', '.join(MATRIX_KEYS)} (docs/matrices.md says "
                                    f"what each takes)")
    p = Parsing(source, base_dir, _merge(raw, source), {k.name: k.default for k in KEYS}, vllm_absent=vllm_absent)
    for keys, parse in PARSERS:
        value = parse(p)
        p.parsed.update(zip(keys, value) if len(keys) > 1 else [(keys[0], value)])
    return Matrix(source=source, raw=raw, **{k.attr: p.parsed[k.name] for k in KEYS if k.attr})


def absent_default_note(matrix: Matrix, vllm_absent: str | None) -> str | None:
    """Where vLLM is absent (`vllm_absent`, as `parse_matrix` took it), what a matrix that names no engine (nor its
    preset) runs and why, for the first line of the command that runs or checks it; None where it names one or where
    vLLM is present."""
    if vllm_absent is None or "engine" in _merge(matrix.raw, matrix.source):
        return None
    return catalog.absent_default(vllm_absent)
