"""Tools some tests drive, from Debian's packages (``make promtool``, ``make pgbouncer``,
``make haproxy``): found where Debian puts them, or the test skips locally and fails under
``CI=true``."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import IN_CI


def executable(command: str, package: str | None = None) -> str:
    """The path of ``command`` (on PATH, or in /usr/sbin), from Debian's ``package`` (by
    default the command's name), which ``make <command>`` installs."""
    found = shutil.which(command) or shutil.which(command, path="/usr/sbin")
    if found is None:
        message = (
            f"{command} is not installed: run `make {command}` (as root on Debian), or "
            f"`sudo apt-get install --no-install-recommends {package or command}` "
            "(its service need not run)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found
