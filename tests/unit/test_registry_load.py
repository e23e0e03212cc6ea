"""The built-in workflows are loaded once, and a thread that asks for a workflow while another
thread is still loading them waits for the load instead of finding none."""

from __future__ import annotations

import threading

from awooop.workflows import registry


def test_a_second_thread_waits_for_the_first_threads_load(monkeypatch):
    importing = threading.Event()
    release = threading.Event()
    imported: list[str] = []

    def gated_import(name: str) -> None:
        imported.append(name)
        if len(imported) == 1:
            importing.set()
            assert release.wait(10), "the test never released the first import"

    monkeypatch.setattr(registry, "_builtin_loaded", False)
    monkeypatch.setattr(registry.importlib, "import_module", gated_import)
    loaders = [threading.Thread(target=registry.load, name=f"load-{i}") for i in range(2)]

    loaders[0].start()
    assert importing.wait(10), "the first thread never started loading"
    loaders[1].start()
    # The second load must not return while the first one is still importing.
    loaders[1].join(timeout=0.5)
    second_returned_early = not loaders[1].is_alive()
    release.set()
    for t in loaders:
        t.join(10)

    assert not second_returned_early, "load() returned before the built-in workflows were loaded"
    assert imported == [
        "awooop.workflows.builtin",
        "awooop.workflows.operations",
        "awooop.workflows.late",
    ], "the built-in modules were imported more (or less) than once"
