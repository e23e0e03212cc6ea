"""Journal entries as the step records write them: one JSON array, in which a step output
encoded when it was checked goes in as that text instead of being encoded again."""

from __future__ import annotations

import json

from awooop.store import jsonb


def checked(entry: dict, output: object) -> jsonb.JournalEntry:
    made = jsonb.JournalEntry(entry)
    made.set_output(output, json.dumps(output, ensure_ascii=False))
    return made


def test_entries_decode_to_what_they_hold_whether_or_not_their_output_was_encoded():
    entries = [
        {"step": "a", "status": "FAILED", "error": "boom"},
        checked({"step": "b", "status": "SUCCEEDED"}, {"text": "caf\u00e9", "n": [1, 2.5]}),
        checked({}, None),
        checked({"step": "c"}, "just text"),
    ]

    assert json.loads(jsonb.dumps_entries(entries)) == [dict(e) for e in entries]
    assert jsonb.dumps_entries([]) == "[]"


def test_an_encoded_output_is_written_as_its_text_not_encoded_again():
    output = {"answer": 42}
    entry = jsonb.JournalEntry(step="b")
    # A text that differs from what json.dumps would make of the output shows which was used
    entry.set_output(output, '{"answer": 42, "from": "the check"}')

    written = json.loads(jsonb.dumps_entries([entry]))

    assert written == [{"step": "b", "output": {"answer": 42, "from": "the check"}}]
    assert json.loads(jsonb.dumps_output(output, [entry])) == {"answer": 42, "from": "the check"}


def test_an_output_replaced_after_it_was_encoded_is_encoded_anew():
    entry = jsonb.JournalEntry(step="b")
    entry.set_output({"answer": 42}, '{"answer": 42, "from": "the check"}')
    entry["output"] = {"needed": False}

    assert json.loads(jsonb.dumps_entries([entry])) == [{"step": "b", "output": {"needed": False}}]
    assert json.loads(jsonb.dumps_output({"other": 1}, [entry])) == {"other": 1}
