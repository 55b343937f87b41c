"""`uv pip` with the package sources and constraints that this interpreter's pip is configured with.

    python preparation/uv_pip.py install -r requirements-cpu.txt    # uv pip install --python <this python> ...
    python preparation/uv_pip.py --show                             # the options taken over from pip, one line

uv reads neither pip.conf nor PIP_* variables. A machine whose pip is pointed at a local wheel store, a mirror or a
constraint file (``pip config list``) would otherwise resolve differently under uv: fetch another torch build, miss
a local wheel, or fail. This reads pip's own view of its configuration (``pip config list``: the files and PIP_*
variables, an environment variable overriding the [install] section overriding [global]) and passes the options
that choose what gets installed to uv. Without any pip configuration nothing of it is added. Either way uv is told
to pick versions as pip does (the best match over all indexes and find-links: ``--index-strategy
unsafe-best-match``, unless the caller or UV_INDEX_STRATEGY says otherwise).

Runs with the standard library only (it runs in a venv that holds nothing but pip and uv yet); the uv is the one
installed in this interpreter (the ``uv`` package pinned in requirements.txt).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip option -> uv option; each of these may hold several whitespace-separated values, as pip reads them.
LISTS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
    "only-binary": "--only-binary",
    "no-binary": "--no-binary",
}
FLAGS = {"no-index": ["--no-index"], "pre": ["--prerelease", "allow"]}
# pip option -> the environment variable uv reads for it (set only when the caller has not set it).
ENV = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "default-timeout": "UV_HTTP_TIMEOUT"}
# uv pip subcommands that resolve or fetch packages, and so take source options.
RESOLVING = {"install", "compile", "sync"}
TRUE = {"1", "true", "yes", "on"}


def pip_config(python: str = sys.executable) -> dict[str, str]:
    """``pip config list`` of ``python``'s pip as {section.key: value}; empty when pip is absent or fails."""
    try:
        out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_config_list(out)


def parse_config_list(text: str) -> dict[str, str]:
    """Lines ``section.key='value'`` (pip writes the value with repr) -> {section.key: value}."""
    items = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or "." not in key:
            continue
        try:
            items[key.strip()] = str(ast.literal_eval(value.strip()))
        except (ValueError, SyntaxError):
            items[key.strip()] = value.strip()
    return items


def effective(config: dict[str, str], key: str) -> str | None:
    """The value pip's install command uses: a PIP_* variable over [install] over [global]."""
    for section in (":env:", "install", "global"):
        if f"{section}.{key}" in config:
            return config[f"{section}.{key}"]
    return None


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The uv pip options and environment variables that carry pip's configuration over."""
    args: list[str] = []
    for key, option in LISTS.items():
        for value in (effective(config, key) or "").split():
            args += [option, value]
    for key, flag in FLAGS.items():
        if (effective(config, key) or "").strip().lower() in TRUE:
            args += flag
    env = {var: value for key, var in ENV.items() if (value := effective(config, key)) and var not in os.environ}
    return args, env


def strategy(argv: list[str]) -> list[str]:
    """pip's choice among indexes: the best version from all of them and the find-links together. uv's default
    (first-index) takes a package only from the first index that has it, so a local store or an extra index (PyTorch's)
    holding other versions of a package than the one pinned would make the pin fail or pick another build."""
    if "UV_INDEX_STRATEGY" in os.environ or any(a.startswith("--index-strategy") for a in argv):
        return []
    return ["--index-strategy", "unsafe-best-match"]


def main(argv: list[str]) -> int:
    args, env = uv_options(pip_config())
    if argv == ["--show"]:
        shown = args + [f"{k}={v}" for k, v in env.items()]
        print(" ".join(shown) if shown else "nothing (pip has no configuration to carry over)")
        return 0
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        from uv import find_uv_bin
    except ImportError:
        print(f"uv_pip: error: uv is not installed in {sys.executable}'s environment.", file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command in RESOLVING:
        rest = [*args, *strategy(rest), *rest]
    cmd = [find_uv_bin(), "pip", command, "--python", sys.executable, *rest]
    return subprocess.run(cmd, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
