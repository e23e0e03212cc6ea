"""``make bench-capacity`` rewrites only its block of docs/scaling.md (bench.capacity)."""

from __future__ import annotations

from bench.capacity import BEGIN, END, NEW_DOCUMENT, replace_block, write_block


def test_text_outside_the_markers_is_kept_and_the_old_block_replaced():
    before = f"# Scaling\n\nProse above.\n\n{BEGIN}\nold figures\n{END}\n\nProse below.\n"

    after = replace_block(before, "new figures\n")

    assert after == f"# Scaling\n\nProse above.\n\n{BEGIN}\nnew figures\n{END}\n\nProse below.\n"


def test_writing_the_same_block_twice_changes_nothing():
    once = replace_block("intro\n", "figures")

    assert replace_block(once, "figures") == once


def test_a_missing_document_gets_a_title_a_sentence_and_the_markers(tmp_path):
    path = tmp_path / "docs" / "scaling.md"

    write_block(path, "figures")

    assert path.read_text() == f"{NEW_DOCUMENT}\n{BEGIN}\nfigures\n{END}\n"


def test_a_document_without_markers_gets_them_at_its_end():
    after = replace_block("# Scaling\n\nThe author's prose.\n", "figures")

    assert after == f"# Scaling\n\nThe author's prose.\n\n{BEGIN}\nfigures\n{END}\n"


def test_an_end_marker_before_the_begin_marker_is_not_taken_for_a_block():
    text = f"{END}\nprose\n"

    after = replace_block(text, "figures")

    assert after.startswith(text) and after.endswith(f"{BEGIN}\nfigures\n{END}\n")
