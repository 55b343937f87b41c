"""The run's manifest.json: its shape (config, cells, models) and how its prompts were made, the plan's and those its
stages handed over."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from benchmarks.records.manifest_read import ManifestJson, PromptManifest
from benchmarks.run.context import RunContext
from benchmarks.run.redaction import redacted


def build_manifest(ctx: RunContext) -> ManifestJson:
    """The run's shape (config, cells, models); its environment fields are the latest invocation's. What each unit
    was measured with is in its provenance record. Credentials written into a URL are not kept."""
    plan = ctx.plan
    env = plan.env
    return redacted({
        "run_id": plan.run_dir.name,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config_path": plan.matrix.source,
        "config": dataclasses.asdict(plan.matrix),
        "cells": {c.cell_id: dataclasses.asdict(c) for c in plan.cells},
        "git_sha": env["git_sha"],
        "packages": env["packages"],
        "platform": env["platform"],
        "hardware": env["hardware"],
        "models": plan.models,
        "prompts_skipped": ctx.skipped,
        "prompts": prompt_manifest(ctx),
    })


def prompt_manifest(ctx: RunContext) -> PromptManifest:
    """How the run's prompts were made: the chat template's keyword arguments and hash, warnings about the drafts,
    and per workload each measured prompt's row, hash, length and construction (context rows, first answer)."""
    setup = ctx.plan.setup
    return {
        "chat_template": setup.template if setup else None,
        "chat_template_sha256": setup.template_sha256 if setup else None,
        "template_ignores": setup.template_ignores if setup else [],
        "max_prompt_tokens": setup.max_prompt_tokens if setup else None,
        "trained_lengths": setup.trained_lengths if setup else None,
        "warnings": setup.warnings if setup else [],
        "first_answers_by": {"cell_id": setup.generator.cell_id, "engine": setup.generator.engine,
                             "label": setup.generator.label} if setup and setup.generator else None,
        "workloads": {key: [{"index": p.index, "sha256": p.sha256, "tokens": len(p.ids), **p.workload_fields(),
                             **p.construction} for p in measured]
                      for key, (measured, _) in ctx.prompts.items()},
    }
