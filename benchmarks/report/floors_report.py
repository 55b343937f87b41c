"""AR TPOT against the memory-bandwidth floor, and the engine's own per-step floor check, as report lines."""
from __future__ import annotations

from typing import Any

from benchmarks.analysis.summary import TimingErrors
from benchmarks.core import metrics
from benchmarks.core.numbers import is_number
from benchmarks.hardware import detect
from benchmarks.hardware.provenance import DTYPE_BYTES
from benchmarks.records.manifest_read import Manifest
from benchmarks.records.store import ProvenanceRecord
from benchmarks.records.summary_row import SummaryRow
from benchmarks.report.tables import setting


def _run_weight_bytes(model: dict[str, Any], options: dict[str, Any]) -> tuple[float | None, str]:
    """The target's weight bytes as the run holds them (its dtype when set), and where the figure comes from."""
    dtype = str(options.get("dtype") or "auto")
    source = model.get("weight_bytes_source") or "on disk"
    if dtype in DTYPE_BYTES and model.get("parameters"):
        return (model["parameters"] * DTYPE_BYTES[dtype],
                f"{model['parameters'] / 1e6:.1f} M parameters from {source} × {DTYPE_BYTES[dtype]} bytes ({dtype})")
    return model.get("weight_bytes"), source


def engine_bandwidth(manifest: Manifest, provenances: dict[str, ProvenanceRecord]) -> dict[str, Any]:
    """The manifest's hardware, with the bandwidth of the device an engine saw when the host could not name it (a
    TPU VM without TPU_ACCELERATOR_TYPE: only the engine that holds the chip knows its kind)."""
    hw = dict(manifest.hardware)
    platform = manifest.platform
    for p in provenances.values() if not hw.get("bandwidth_gbps") and platform != "cpu" else ():
        device = setting(p.get("describe") or {}, "device_name") or setting(p.get("describe") or {}, "device")
        bw, source = detect.bandwidth(platform or "", str(device)) if device else (None, "")
        if bw:
            source = f"{source}, the device as the engine named it"
            return hw | {"device": device, "bandwidth_gbps": bw / 1e9, "bandwidth_source": source}
    return hw


def floor_lines(rows: list[SummaryRow], manifest: Manifest,
                provenances: dict[str, ProvenanceRecord] | None = None) -> list[str]:
    """AR TPOT against the memory-bandwidth floor (weight bytes / bandwidth); below it is a timing bug."""
    hw = engine_bandwidth(manifest, provenances or {})
    bw = hw.get("bandwidth_gbps")
    model = manifest.models.get(manifest.target, {})
    weight_bytes, source = _run_weight_bytes(model, manifest.config.engine_options)
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
    cache = hw.get("cache_bytes") or 0
    binding = not (cache and weight_bytes <= cache)
    if not binding:
        lines.append(f"The weights fit the {cache / 2**20:.0f} MiB CPU cache, so the DRAM floor does not bind here; "
                     f"times are reported against it but not flagged.")
    for r in rows:
        if r.method == "baseline" and is_number(r.tpot_ms_mean):
            bad = binding and metrics.below_floor(r.tpot_ms_mean, floor)
            achieved = weight_bytes / (r.tpot_ms_mean / 1000.0) / 1e9
            at = f" @B={r.batch_size}" if r.batched else ""  # weights read once per step
            lines.append(f"- {r.engine} AR{at} on {r.dataset}: TPOT {r.tpot_ms_mean:.3f} ms, "
                         f"{achieved:.1f} GB/s of weights ({100 * achieved / bw:.0f} % of the bandwidth)"
                         + (" **BELOW THE FLOOR: timing error, not a result**" if bad else ""))
    return lines


def timing_error_lines(found: list[TimingErrors]) -> list[str]:
    """The engine's own per-request check (JAX: decode step time against the target+draft bytes floor)."""
    lines = [f"- {t.engine} {t.label} on {t.workload}: {t.below} of {t.checked} requests step faster than the "
             f"per-step floor ({(t.worst_step_s or 0) * 1e3:.3f} ms < {(t.worst_floor_s or 0) * 1e3:.3f} ms) "
             f"**TIMING ERROR: not a result**" for t in found if t.below]
    if found and not lines:
        lines.append(f"The engine's per-step floor check ran on {sum(t.checked for t in found)} requests: none "
                     f"below it.")
    return lines
