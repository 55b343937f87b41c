"""Execute notebooks/reproduce.ipynb end to end as a user would, with parameters injected after its 'parameters' cell.

    python -m preparation.execute_notebook --out run.ipynb CLONE=False ENGINE=jax PRESET=tiny DATASET=humaneval N=8

Each NAME=VALUE is read as a Python literal (else kept as text). The kernel talks over unix sockets (ipc), so the
notebook runs where no TCP socket may open, loopback included (a TPU sandbox): there ipykernel's one TCP socket, the
pipe that carries output of forked children (never used here: the notebook reads its commands' output itself), would
abort the kernel inside libzmq, so the kernel this module starts goes without it. The executed notebook is written to
--out, with its PNG figures beside it; the status is 1 when a cell raised.
"""
from __future__ import annotations

import argparse
import ast
import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "reproduce.ipynb"


def with_parameters(nb: nbformat.NotebookNode, params: dict[str, Any]) -> nbformat.NotebookNode:
    """Insert an assignment cell after the cell tagged 'parameters', as papermill does."""
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{name} = {value!r}" for name, value in params.items())
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]}))
    return nb


KERNEL = "dflash-ipc"  # the kernel spec this module writes for its own runs


def kernel() -> None:
    """ipykernel without the TCP pipe for forked children's output (`python -m preparation.execute_notebook
    --kernel -f CONNECTION_FILE`)."""
    from ipykernel import iostream, kernelapp

    def no_pipe(self: iostream.IOPubThread) -> None:
        self._pipe_flag = False

    iostream.IOPubThread._setup_pipe_in = no_pipe  # type: ignore[method-assign]
    kernelapp.launch_new_instance(argv=sys.argv[2:])


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout_s: int = 1800) -> None:
    """Run `nb` in place in `cwd`, its kernel on ipc; raises CellExecutionError at a failing cell, the outputs so far
    kept in `nb`."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "kernels" / KERNEL
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "preparation.execute_notebook", "--kernel", "-f", "{connection_file}"]
        (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python",
                                                       "env": {"PYTHONPATH": os.pathsep.join(
                                                           filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}}))
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [tmp, os.environ.get("JUPYTER_PATH")]))
        km = KernelManager(kernel_name=KERNEL, transport="ipc", ip=str(Path(tmp) / "kernel"))
        NotebookClient(nb, km=km, timeout=timeout_s, resources={"metadata": {"path": str(cwd)}}).execute()


def figures(nb: nbformat.NotebookNode, folder: Path) -> list[Path]:
    """Every PNG output of `nb`, written to `folder` in order."""
    pngs = [o["data"]["image/png"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"figure-{i:02d}.png" for i in range(len(pngs))]
    for path, png in zip(paths, pngs):
        path.write_bytes(base64.b64decode(png))
    return paths


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where the executed notebook is written")
    ap.add_argument("--timeout-s", type=int, default=1800, help="the longest one cell may run")
    ap.add_argument("params", nargs="*", metavar="NAME=VALUE")
    args = ap.parse_args(argv)
    bad = [p for p in args.params if "=" not in p or not p.split("=", 1)[0].isidentifier()]
    if bad:
        ap.error(f"parameters are NAME=VALUE: {' '.join(bad)}")
    params = {k: literal(v) for k, v in (p.split("=", 1) for p in args.params)}
    params.setdefault("WORKDIR", str(ROOT))
    nb = with_parameters(nbformat.read(NOTEBOOK, as_version=4), params)
    status = 0
    try:
        execute(nb, ROOT, args.timeout_s)
    except CellExecutionError as err:
        print(f"execute_notebook: a cell raised: {err.ename}: {err.evalue}", file=sys.stderr)
        status = 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, args.out)
    shown = figures(nb, args.out.with_suffix(""))
    print(f"execute_notebook: {args.out} written, {len(shown)} figure(s) in {args.out.with_suffix('')}")
    return status


if __name__ == "__main__":
    if sys.argv[1:2] == ["--kernel"]:
        kernel()
    else:
        sys.exit(main())
