"""The hostile-input scenario's "wrong" credentials are never the right ones: it asserts a
401 for each, so a wrong credential that happened to equal the real one would fail it."""

from __future__ import annotations

import pytest

from tests.chaos.hostile import wrong


@pytest.mark.parametrize("secret", ["xwKtps5z6Lms2m", "ywKtps5z6Lms2m", "x", "abcba", "aaaa"])
def test_a_wrong_credential_differs_from_the_right_one(secret):
    assert wrong(secret) != secret
    assert len(wrong(secret)) == len(secret)
