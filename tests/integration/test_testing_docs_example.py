"""docs/testing.md's awooop_env example runs and passes on PostgreSQL."""

from __future__ import annotations

from awooop.testing.environment import AwooopEnv
from tests.unit.test_testing_docs_example import doc_namespace, doc_tests


def test_the_fixture_example_in_the_docs_passes(awooop_env: AwooopEnv) -> None:
    tests = doc_tests(doc_namespace(), "awooop_env")

    assert len(tests) == 1
    for test in tests:
        test(awooop_env)
