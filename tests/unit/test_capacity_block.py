"""``make bench-capacity`` rewrites only its block of docs/scaling.md (bench.capacity)."""

from __future__ import annotations

from bench.capacity import BEGIN, END, NEW_DOCUMENT, write_block


def written(tmp_path, before: str | None, block: str) -> str:
    path = tmp_path / "docs" / "scaling.md"
    if before is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(before)
    write_block(path, block)
    return path.read_text()


def test_text_outside_the_markers_is_kept_and_the_old_block_replaced(tmp_path):
    before = f"# Scaling\n\nProse above.\n\n{BEGIN}\nold figures\n{END}\n\nProse below.\n"

    after = written(tmp_path, before, "new figures\n")

    assert after == f"# Scaling\n\nProse above.\n\n{BEGIN}\nnew figures\n{END}\n\nProse below.\n"


def test_writing_the_same_block_twice_changes_nothing(tmp_path):
    once = written(tmp_path, "intro\n", "figures")

    assert written(tmp_path, once, "figures") == once


def test_a_missing_document_gets_a_title_a_sentence_and_the_markers(tmp_path):
    after = written(tmp_path, None, "figures")

    assert after == f"{NEW_DOCUMENT}\n{BEGIN}\nfigures\n{END}\n"


def test_a_document_without_markers_gets_them_at_its_end(tmp_path):
    after = written(tmp_path, "# Scaling\n\nThe author's prose.\n", "figures")

    assert after == f"# Scaling\n\nThe author's prose.\n\n{BEGIN}\nfigures\n{END}\n"


def test_an_end_marker_before_the_begin_marker_is_not_taken_for_a_block(tmp_path):
    text = f"{END}\nprose\n"

    after = written(tmp_path, text, "figures")

    assert after.startswith(text) and after.endswith(f"{BEGIN}\nfigures\n{END}\n")
