"""Hostile-input cases (careless or hostile matrices, prompt files, models, run folders) run through the CLI.

Each case builds its inputs in a folder of its own and runs one or more commands in this process (a scripted engine
stands in for JAX and vLLM, so nothing compiles); `classify` names the outcome:
- `clear error`: exit 2 (or the status the case expects, 5 where the machine lacks a model or dataset), with a line
  holding the case's fragment, nothing else that the case forbids, and no run folder left behind by a run that
  failed on its input;
- `ok`: valid input ran (or planned), exit 0;
- `traceback`, `hang` (no end within HANG_S), `silent failure` (bad input passed with exit 0), `late error` (refused
  only after the run folder was made), `misleading` (an error that names the wrong cause, or a wrong status),
  `refused valid input`.
tests/cli/test_hostile_validate.py asserts each case is `clear error` or `ok`. As a tool, from a checkout's root
(any commit that has the scripted engine of tests/catalog_engine.py), it prints the counts per class and each case:
    python -m tests.cli.hostile_cases
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TINY = Path("models") / "tiny"
HANG_S = 60
GOOD = ["clear error", "ok"]


@dataclass(frozen=True)
class Case:
    """One input and the commands it goes through. `make(folder)` writes the input and returns the commands
    (argument lists); `fragment` is what a clear error says (None: the input is valid); `status` the exit status it
    must give; `forbidden` what its output must not say."""

    family: str
    name: str
    make: Callable[[Path], list[list[str]]]
    fragment: str | None
    status: int = 2
    forbidden: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    rc: int | None
    out: str
    err: str
    error: str = ""  # the exception that escaped, formatted
    hung: bool = False


class _Hang(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Hang()


def call(argv: list[str]) -> Outcome:
    """One CLI command in this process: its status and output, an escaped exception, or a hang."""
    from benchmarks import cli

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main([str(a) for a in argv])
        return Outcome(int(rc), out.getvalue(), err.getvalue())
    except SystemExit as exc:
        return Outcome(exc.code if isinstance(exc.code, int) else 1, out.getvalue(), err.getvalue())
    except _Hang:
        return Outcome(None, out.getvalue(), err.getvalue(), hung=True)
    except BaseException:  # noqa: BLE001 - what escapes the CLI is the finding
        return Outcome(None, out.getvalue(), err.getvalue(), error=traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def classify(case: Case, folder: Path, outcomes: list[Outcome], run_dirs: list[Path]) -> str:
    """The worst class among a case's commands (see the module docstring)."""
    classes = []
    for o, run_dir in zip(outcomes, run_dirs):
        text = o.out + o.err
        if o.hung:
            classes.append("hang")
        elif o.error or "Traceback (most recent call last)" in text:
            classes.append("traceback")
        elif case.fragment is None:
            classes.append("ok" if o.rc == 0 else "refused valid input")
        elif o.rc == 0 and case.status != 0:
            classes.append("silent failure")
        elif case.status in (2, 5) and run_dir is not None and run_dir.exists():
            classes.append("late error")
        elif o.rc != case.status or case.fragment not in text or any(f in text for f in case.forbidden):
            classes.append("misleading")
        else:
            classes.append("clear error")
    order = ["hang", "traceback", "silent failure", "late error", "misleading", "refused valid input", "clear error",
             "ok"]
    return min(classes, key=order.index)


def run_case(case: Case, folder: Path) -> tuple[str, list[Outcome]]:
    """Build the case's input in `folder`, run its commands, classify them."""
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    try:
        commands = case.make(folder)
        outcomes, run_dirs = [], []
        for argv in commands:
            run_dir = Path(argv[argv.index("--run-dir") + 1]) if "--run-dir" in argv else None
            run_dirs.append(run_dir if run_dir is not None and not os.path.lexists(run_dir) else None)
            outcomes.append(call(argv))
        return classify(case, folder, outcomes, run_dirs), outcomes
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


# --- inputs ----------------------------------------------------------------------------------------------------------

def tiny() -> Path:
    from benchmarks.core.paths import ROOT

    return ROOT / TINY


def prompts(folder: Path, rows: list[object] | None = None, name: str = "prompts.jsonl") -> Path:
    path = folder / name
    rows = rows if rows is not None else [{"prompt": f"question {i}"} for i in range(6)]
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def matrix_text(folder: Path, data: Path | None = None, **extra: object) -> str:
    import yaml

    raw = {"name": "hostile", "target": str(tiny() / "target"), "drafts": {"dflash": str(tiny() / "dflash")},
           "engine": "scripted", "methods": ["baseline", "dflash"], "k": [3], "max_new_tokens": 8, "num_prompts": 2,
           "warmup_prompts": 1, "drift_prompts": 0, "engine_options": {"max_model_len": 512},
           "datasets": [{"name": "local", "path": str(data or prompts(folder))}]}
    raw.update(extra)
    return yaml.safe_dump(raw)


def validate_and_run(path: Path, folder: Path, plan: bool = False) -> list[list[str]]:
    """`validate` the matrix file, then run it (or print its plan) into a run folder of the case's own."""
    return [["validate", str(path)], ["matrix", str(path), "--run-dir", str(folder / "run")] + (["--plan"] if plan
                                                                                                 else [])]


def with_matrix(plan: bool = False, data: Callable[[Path], Path] | None = None, text: str | None = None,
                **extra: object) -> Callable[[Path], list[list[str]]]:
    """A case whose input is a matrix: `extra` keys over the base, a prompt file from `data`, or the YAML `text`
    (its @PROMPTS@ and @TINY@ filled in)."""
    def make(folder: Path) -> list[list[str]]:
        path = folder / "m.yaml"
        file = data(folder) if data else prompts(folder)
        path.write_text(text.replace("@PROMPTS@", str(file)).replace("@TINY@", str(tiny())) if text
                        else matrix_text(folder, file, **extra))
        return validate_and_run(path, folder, plan)
    return make


def rows(*items: object) -> Callable[[Path], Path]:
    return lambda folder: prompts(folder, list(items))


def special(make: Callable[[Path], None]) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        path = folder / "special.jsonl"
        make(path)
        return path
    return build


def rendered_ids(text: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny() / "target"))
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                       add_generation_prompt=True, enable_thinking=False)
    return list(tok(rendered, add_special_tokens=False)["input_ids"])


def model_copy(folder: Path, drop: tuple[str, ...] = (), edit: Callable[[dict], None] | None = None) -> Path:
    """The tiny target's files linked into a folder of the case's own, less `drop`, its tokenizer_config edited."""
    out = folder / "target"
    out.mkdir()
    for f in (tiny() / "target").iterdir():
        if f.name not in drop and f.name != "tokenizer_config.json":
            (out / f.name).symlink_to(f.resolve())
    cfg = json.loads((tiny() / "target" / "tokenizer_config.json").read_text())
    if edit:
        edit(cfg)
    if "tokenizer_config.json" not in drop:
        (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def target_case(drop: tuple[str, ...] = (), edit: Callable[[dict], None] | None = None
                ) -> Callable[[Path], list[list[str]]]:
    def make(folder: Path) -> list[list[str]]:
        path = folder / "m.yaml"
        path.write_text(matrix_text(folder, target=str(model_copy(folder, drop, edit))))
        return validate_and_run(path, folder)
    return make


def draft_config(folder: Path, cfg: str) -> Path:
    out = folder / "draft"
    out.mkdir()
    (out / "config.json").write_text(cfg)
    return out


# Aliases nine deep inside `description`, 9^6 = 531,441 nodes once expanded: past the bound, yet small enough that a
# harness without the bound writes it out in seconds (one level more per 9x; a full bomb hung the run).
LAUGHS = "description:\n  l0: &l0 [lol]\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 7))
YAML_HEAD = ("name: hostile\ntarget: @TINY@/target\ndrafts: {dflash: @TINY@/dflash}\nengine: scripted\n"
             "methods: [baseline, dflash]\nk: [3]\nmax_new_tokens: 8\nnum_prompts: 2\nwarmup_prompts: 1\n"
             "drift_prompts: 0\ndatasets: [{name: local, path: @PROMPTS@}]\n")


# --- a finished run, for the commands that read one -----------------------------------------------------------------

_DONE: dict[str, Path] = {}


def done_run() -> Path:
    """A finished scripted run, made once; each case copies it."""
    if "run" not in _DONE:
        folder = Path(tempfile.mkdtemp(prefix="hostile-done-"))
        path = folder / "m.yaml"
        path.write_text(matrix_text(folder))
        outcome = call(["matrix", str(path), "--run-dir", str(folder / "run")])
        assert outcome.rc == 0, outcome.err + outcome.error
        _DONE["run"] = folder / "run"
    return _DONE["run"]


def on_run(change: Callable[[Path], None], *commands: str) -> Callable[[Path], list[list[str]]]:
    """A copy of the finished run changed by `change`, read by each command (`report`, `check lossless`, ...;
    `resume` runs its matrix into it again)."""
    def make(folder: Path) -> list[list[str]]:
        run = folder / "copy"
        shutil.copytree(done_run(), run, symlinks=True)
        change(run)
        return [["matrix", str(done_run().parent / "m.yaml"), "--run-dir", str(run)] if c == "resume"
                else [*c.split(), str(run)] for c in commands]
    return make


def unit_line(line: str) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        unit = sorted((run / "units").glob("*.jsonl"))[0]
        unit.write_text(unit.read_text() + line + "\n")
    return change


def foreign_cell_unit(run: Path) -> None:
    unit = sorted((run / "units").glob("*.jsonl"))[0]
    record = json.loads(unit.read_text().splitlines()[0])
    record["cell_id"] = "0123456789ab"
    (run / "units" / f"0123456789ab__{unit.stem.split('__', 1)[1]}.jsonl").write_text(json.dumps(record) + "\n")


def lock_folder(run: Path) -> None:
    (run / ".lock").unlink(missing_ok=True)
    (run / ".lock").mkdir()


def loop(run: Path) -> None:
    shutil.rmtree(run)
    run.symlink_to(run)


def out_file(folder: Path) -> list[list[str]]:
    (folder / "out").write_text("mine\n")
    return [["study", "kflat", "--random-weights", "--shape", "qwen3-tiny", "--out", str(folder / "out")]]


def kflat_model(folder: Path) -> list[list[str]]:
    (folder / "model").mkdir()
    return [["study", "kflat", "--model", str(folder / "model"), "--out", str(folder / "o")]]


# A model of the rerun advice: a unit that fails on its input, as the JAX engine fails on K beyond its draft.
class LastingFailure:
    name = "lasting"

    def load(self, cell: object) -> None:
        raise ValueError("K=20 must be in 1..block_size-1 = 15")

    def close(self) -> None:
        pass


def failing_run(folder: Path) -> list[list[str]]:
    from benchmarks.engines import catalog
    from benchmarks.engines.catalog import EngineOptions, EngineRow

    catalog.ENGINES["lasting"] = EngineRow("lasting", "tests.cli.hostile_cases:LastingFailure",
                                           ("baseline", "dflash"), EngineOptions(lambda: frozenset({"max_model_len"})))
    path = folder / "m.yaml"
    path.write_text(matrix_text(folder, engine="lasting"))
    return [["matrix", str(path), "--run-dir", str(folder / "run")]]


OFFLINE = {"HF_HUB_OFFLINE": "1"}
CASES = [
    # YAML
    Case("yaml", "merge key", with_matrix(True, text=YAML_HEAD + "description: &b {max_model_len: 512}\n"
                                          "engine_options:\n  <<: *b\n"), None),
    Case("yaml", "billion laughs in description", with_matrix(text=YAML_HEAD + LAUGHS),
         "aliases expand to"),
    Case("yaml", "alias inside its own node", with_matrix(text=YAML_HEAD + "description: &d [1, *d]\n"),
         "refers to a node that contains it"),
    Case("yaml", "key twice beside a merge", with_matrix(text=YAML_HEAD + "b: &b {dtype: auto}\n"
                                                         "engine_options: {<<: *b, max_model_len: 5, "
                                                         "max_model_len: 512}\n"), "given twice"),
    Case("yaml", "nested 5000 deep", with_matrix(text=YAML_HEAD + "description: " + "[" * 5000 + "]" * 5000 + "\n"),
         "nested too deeply"),
    # temperatures and seeds
    Case("temperature", "1e-320", with_matrix(temperature=1.0e-320), "below 0.01"),
    Case("temperature", "0.005 in a list", with_matrix(temperature=[0.0, 0.005]), "below 0.01"),
    Case("temperature", "0.01", with_matrix(True, temperature=0.01), None),
    Case("seed", "2^32", with_matrix(seed=2**32), "above 2147483647"),
    Case("seed", "2^63", with_matrix(seed=2**63), "above 2147483647"),
    Case("seed", "2^31 - 1", with_matrix(True, seed=2**31 - 1), None),
    # prompt files
    Case("prompt file", "FIFO", with_matrix(data=special(lambda p: os.mkfifo(p))), "named pipe (FIFO)"),
    Case("prompt file", "folder", with_matrix(data=special(lambda p: p.mkdir())), "is a folder"),
    Case("prompt file", "link to /dev/zero", with_matrix(data=special(lambda p: p.symlink_to("/dev/zero"))),
         "is a device"),
    Case("prompt file", "broken link", with_matrix(data=special(lambda p: p.symlink_to(p.parent / "gone"))),
         "which does not exist"),
    Case("prompt file", "five identical rows, num_prompts 3",
         with_matrix(data=rows(*[{"prompt": "same question"}] * 5), num_prompts=3, warmup_prompts=0),
         "the same prompt as line 1"),
    Case("prompt file", "prompt and messages alike",
         with_matrix(data=rows({"prompt": "a"}, {"messages": [{"role": "user", "content": "a"}]}, {"prompt": "b"},
                               {"prompt": "c"})), "the same prompt as line 1"),
    Case("prompt file", "the same prompt_ids twice",
         with_matrix(data=rows({"prompt_ids": [5, 6]}, {"prompt": "b"}, {"prompt_ids": [5, 6]}, {"prompt": "c"})),
         "the same prompt as line 1"),
    Case("prompt file", "prompt_ids equal to a text row's ids",
         with_matrix(data=lambda f: prompts(f, [{"prompt": "hello"}, {"prompt_ids": rendered_ids("hello")},
                                                {"prompt": "b"}, {"prompt": "c"}]), num_prompts=3),
         "render to the same token ids"),
    Case("prompt file", "lone surrogate in a prompt", with_matrix(data=rows('{"prompt": "bad \\ud800"}',
                                                                            *[{"prompt": f"q{i}"} for i in range(3)])),
         "lone surrogate"),
    Case("prompt file", "lone surrogate in a message",
         with_matrix(data=rows('{"messages": [{"role": "user", "content": "\\udfff"}]}',
                               *[{"prompt": f"q{i}"} for i in range(3)])), "lone surrogate"),
    Case("prompt file", "prompt_ids outside the vocabulary",
         with_matrix(data=rows({"prompt_ids": [1, 2, 5000]}, *[{"prompt": f"q{i}"} for i in range(3)])),
         "outside the tokenizer's vocabulary"),
    # models
    Case("models", "target without a chat template",
         target_case(drop=("chat_template.jinja",), edit=lambda c: c.pop("chat_template", None)),
         "has no chat template"),
    Case("models", "target without tokenizer files", target_case(drop=("tokenizer.json", "tokenizer_config.json")),
         "tokenizer encodes nothing"),
    Case("models", "dflash draft that is the target", with_matrix(drafts={"dflash": str(Path(TINY, "target"))}),
         "is not a DFlash draft"),
    Case("models", "dflash draft that is an EAGLE-3 draft", with_matrix(drafts={"dflash": str(Path(TINY, "eagle3"))}),
         "is not a DFlash draft"),
    Case("models", "k above a custom block_size's draft", with_matrix(block_size=32, k=[20]),
         "was built with block_size 16"),
    Case("models", "block_size below the draft's", with_matrix(block_size=8, k=[3]), "was built with block_size 16"),
    Case("models", "draft config that is not JSON",
         lambda f: with_matrix(drafts={"dflash": str(draft_config(f, "{oops"))})(f), "does not read as a JSON config"),
    Case("models", "hub draft id offline", with_matrix(drafts={"dflash": "z-lab/none-such-DFlash-b16"}),
         "HF_HUB_OFFLINE is set", status=5, env=OFFLINE),
    Case("models", "hub target id offline", with_matrix(target="none-such/Qwen3-404B"), "HF_HUB_OFFLINE is set",
         status=5, env=OFFLINE),
    Case("datasets", "hub dataset offline, not cached", with_matrix(datasets=["alpaca"]), "`python -c \"import "
         "datasets; datasets.load_dataset('tatsu-lab/alpaca'", status=5, env=OFFLINE),
    # what a run prints when a unit fails on its input
    Case("rerun advice", "a unit failing on its input", failing_run, "would fail the same way on a rerun", status=1,
         forbidden=("Rerun the same command to retry them",)),
    # the commands that read a run, against the current code
    Case("reading a run", "truncated manifest.json",
         on_run(lambda r: (r / "manifest.json").write_text('{"run_id": '), "report", "check lossless"),
         "manifest.json"),
    Case("reading a run", "manifest.json holding []", on_run(lambda r: (r / "manifest.json").write_text("[]"),
                                                             "report", "check lossless", "check published"),
         "manifest.json"),
    Case("reading a run", "unit line that is not an object", on_run(unit_line("[1, 2]"), "report"),
         "left out of the records", status=4),
    Case("reading a run", "unit record without cell_id", on_run(unit_line('{"kind": "request"}'), "report"),
         "left out of the records", status=4),
    Case("reading a run", "unit of a cell not in the manifest", on_run(foreign_cell_unit, "report"),
         "cell 0123456789ab is not in the manifest", status=0),
    Case("reading a run", "deeply nested unit line", on_run(unit_line("[" * 100_000 + "]" * 100_000), "report"),
         "left out of the records", status=4),
    Case("reading a run", ".lock that is a folder", on_run(lock_folder, "resume"), ".lock"),
    Case("reading a run", "run folder that is a link loop", on_run(loop, "report", "check lossless"), "link"),
    Case("options", "--out naming a file", out_file, "is a file; give a folder"),
    Case("options", "kflat --model without a config", kflat_model, "config.json"),
]


def scripted_engine() -> None:
    """The scripted engine of tests/catalog_engine.py as catalog row `scripted`."""
    from benchmarks.engines import catalog
    from benchmarks.engines.catalog import EngineOptions, EngineRow

    catalog.ENGINES["scripted"] = EngineRow(
        "scripted", "tests.catalog_engine:CatalogEngine", ("baseline", "dflash"),
        EngineOptions(lambda: frozenset({"step_ms", "max_model_len", "dtype"}), choices={"dtype": ("auto", "float32")}))


def main() -> int:
    """Run every case in a temporary folder and print the counts per class, then each case's class."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["DFLASH_RUNS_DIR"] = tempfile.mkdtemp(prefix="hostile-runs-")
    sys.path.insert(0, str(Path.cwd()))
    scripted_engine()
    found = []
    for i, case in enumerate(CASES):
        folder = Path(tempfile.mkdtemp(prefix=f"hostile-{i}-"))
        kind, outcomes = run_case(case, folder)
        first = next((line for o in outcomes for line in (o.error or o.err).splitlines() if line.strip()), "")
        found.append((case, kind, first))
    counts = Counter(kind for _, kind, _ in found)
    print("| " + " | ".join(counts) + " |\n|" + "---|" * len(counts) + "\n| " + " | ".join(map(str, counts.values()))
          + " |\n")
    for case, kind, first in found:
        print(f"{case.family:14} {case.name:42} {kind:18} {first[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
