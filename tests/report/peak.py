"""Run `dra-webhook report` in a child process and read its own peak RSS.

Not from wait4's ru_maxrss: at exec the kernel folds the forked parent's high-water mark into
the child's (a child of a 150 MiB pytest "peaks" at 150 MiB whatever it does). The child prints
`VmHWM` of its own address space, the one exec made, from /proc/self/status as it exits.
"""

from __future__ import annotations

import re
import subprocess
import sys

MARK = "peak-rss-kib:"
_WRAPPER = (
    "import atexit, runpy, sys\n"
    "def _peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    f"            sys.stderr.write('\\n{MARK}' + line.split()[1] + '\\n')\n"
    "atexit.register(_peak)\n"
    "sys.argv = ['dra-webhook', *sys.argv[1:]]\n"
    "runpy.run_module('app.cli', run_name='__main__')\n"
)


def run_report(*args: str, timeout: float = 300) -> tuple[int, str, str, int]:
    """Exit code, stdout, stderr (without the peak line) and the peak RSS in KiB."""
    result = subprocess.run(
        [sys.executable, "-c", _WRAPPER, "report", *args],
        capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip
    found = re.search(rf"\n{MARK}(\d+)\n", result.stderr)
    err = result.stderr[: found.start()] if found else result.stderr
    return result.returncode, result.stdout, err, int(found.group(1)) if found else 0
