"""Process start-up is in :mod:`awooop.bootstrap`: reading the settings (:mod:`awooop.config`)
imports no workflow, so a module the workflows import may read them; the start-up checks do
import the workflows' registry."""

from __future__ import annotations

import json
import subprocess
import sys

# Imports one module in a fresh interpreter and prints the awooop.workflows modules then loaded.
PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(
    name for name in sys.modules
    if name == "awooop.workflows" or name.startswith("awooop.workflows.")
)))
"""


def workflow_modules_loaded_by(module: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_importing_the_settings_imports_no_workflow():
    assert workflow_modules_loaded_by("awooop.config") == []


def test_the_start_up_checks_import_the_workflow_registry():
    # The probe sees an import of the workflows where there is one.
    assert "awooop.workflows.registry" in workflow_modules_loaded_by("awooop.bootstrap")
