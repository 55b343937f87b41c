"""No tracked text file names a path of the machine it was written on (a home folder, a temporary folder's random
name): docs and recorded results speak of the project, relative or through a variable ($OUT, $TMPDIR)."""
from __future__ import annotations

import re
import subprocess

from benchmarks.core.paths import ROOT

MACHINE_PATH = re.compile(r"(?<![\w.$])/(?:root|home/[\w.-]+|Users/[\w.-]+)/|dflash-device-site\.(?!X{6})\w{6}")


def test_tracked_files_name_no_machine_paths():
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
                           ).stdout.decode().split("\0")
    found = []
    for name in filter(None, files):
        path = ROOT / name
        if name == "tests/test_portable_paths.py" or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: wheels, archives, weights
            continue
        for i, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{name}:{i}: {line.strip()[:120]}")
    assert not found, "paths of one machine (make them relative or configurable):\n" + "\n".join(found)
