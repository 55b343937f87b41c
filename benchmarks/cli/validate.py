"""`validate`: check matrix files against the schema, the engines' options, this machine and the files and models
they name, then build each one's run plan (benchmarks/run/plan.py: the same checks a run makes before it writes
anything, so that `validate` and the plan refuse the same things), without running; every file is checked, one line
per problem. A matrix's own errors exit BAD_INPUT; what this machine lacks for a matrix that is otherwise right (a
hub model or dataset neither cached nor in reach) is printed as `lacking:` with the command that fetches it, and
exits LACKING (benchmarks/core/exit_codes.py).

Engine options are data (each engine's declaration in its folder, benchmarks/engines/catalog.py), so vLLM's are checked
whether or not vLLM imports here; each ok line adds what its engines' pre-run checks say of how they were checked
(which vLLM release's arguments a matrix with a vLLM engine was checked against). Where vLLM is absent
(`catalog.vllm_absence`: not installed, or left out by set-up), a matrix is checked as `matrix` would run it here: one
that names no engine takes the JAX engine (a line before its ok line says so), one that names an engine needing vLLM
is an error naming the reason."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.config.inputs import InputProblems, check_inputs
from benchmarks.config.matrix_expand import expand, matrix_warnings
from benchmarks.config.matrix_parse import Matrix, absent_default_note, load_matrix
from benchmarks.config.placement import interleave_problem
from benchmarks.core.exit_codes import BadInput, Exit, Lacking, worst
from benchmarks.engines import catalog
from benchmarks.hardware.provenance import detect_platform
from benchmarks.run.plan import build_plan

# It prints and writes no file (the declarations of benchmarks/cli/__init__.py)
OUTPUT_ARGS: tuple[str, ...] = ()
OUTPUT_FILE_ARGS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("configs", type=Path, nargs="+", help="matrix files, e.g. configs/matrices/*.yaml")
    ap.epilog = (f"exit status: {Exit.OK} every file valid; {Exit.BAD_INPUT} a file has errors of its own (error: "
                 f"lines); {Exit.LACKING} no file has errors, but this machine lacks a model, draft or dataset one "
                 f"names (lacking: lines, each with the command that fetches it)")


def problems_of(path: Path, platform: str, vllm_absent: str | None = None
                ) -> tuple[InputProblems, Matrix | None, int, list[str]]:
    """A matrix file's problems (its own, and what this machine lacks for it), the matrix, its cell count and the
    builds its run would start first (`RunPlan.builds`); `vllm_absent`: why vLLM cannot run here (`load_matrix`)."""
    try:
        matrix = load_matrix(path, vllm_absent)
        cells = expand(matrix)
        problem = interleave_problem(matrix, [c.engine for c in cells], platform)
        found = check_inputs(matrix)
        found.wrong[:0] = [f"{problem} (on this {platform} machine)"] if problem else []
        builds = build_plan(matrix, progress=False).builds if not found.wrong and not found.lacking else []
        # the plan finds what only it can: prompts that fit, the batch's memory, a build cache that is a file
    except Lacking as exc:
        return InputProblems(lacking=exc.problems), None, 0, []
    except BadInput as exc:
        return InputProblems(wrong=exc.problems), None, 0, []
    return found, matrix, len(cells), builds


def main(args: argparse.Namespace) -> int:
    platform, absent = detect_platform(), catalog.vllm_absence()
    status: int = Exit.OK
    for path in args.configs:
        found, matrix, cells, builds = problems_of(path, platform, absent)
        for line in found.wrong:
            print(f"error: {line}", file=sys.stderr)
        for line in found.lacking:
            print(f"lacking: {line}", file=sys.stderr)
        if found.wrong or found.lacking or matrix is None:
            status = worst(status, Exit.BAD_INPUT if found.wrong else Exit.LACKING)
            continue
        note = absent_default_note(matrix, absent)
        if note is not None:
            print(f"validate: {path}: {note}", flush=True)
        checked = [f.checked for f in catalog.pre_run_checks(matrix.engines) if f.checked]
        print(f"{path}: ok, {cells} cells" + "".join(f"; {line}" for line in checked))
        for line in builds:
            print(f"note: {path}: {line}", file=sys.stderr)
        for line in matrix_warnings(matrix):
            print(f"warning: {path}: {line}", file=sys.stderr)
    return status
