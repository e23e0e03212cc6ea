"""Named parameters become positional ones for PREPARE, or psycopg2's named ones for the plain
form; casts are left alone."""

from awooop.store.prepared import PreparedStatement


def test_named_parameters_become_positional_in_order_of_first_use():
    stmt = PreparedStatement("s", "SELECT :a, CAST(:b AS jsonb), :a, x::text, 'k:' || :c")

    assert stmt._prepare == "PREPARE s AS SELECT $1, CAST($2 AS jsonb), $1, x::text, 'k:' || $3"
    assert stmt._execute == "EXECUTE s(%s, %s, %s)"
    assert stmt._order == ["a", "b", "c"]


def test_a_lock_statement_is_sent_in_the_same_round_trip_before_execute():
    stmt = PreparedStatement("s", "SELECT :a, :b", lock="SELECT pg_advisory_xact_lock(:n, :a)")

    assert stmt._execute == ("SELECT pg_advisory_xact_lock(%s, %s); EXECUTE s(%s, %s)")
    assert stmt._lock_order == ["n", "a"]


def test_the_plain_form_sends_the_same_sql_with_named_parameters():
    stmt = PreparedStatement("s", "SELECT :a, x::text, 'k:' || :b, 'ten %'")

    assert stmt._plain == "SELECT %(a)s, x::text, 'k:' || %(b)s, 'ten %%'"


def test_the_plain_form_sends_the_lock_statement_in_the_same_round_trip():
    stmt = PreparedStatement("s", "SELECT :a", lock="SELECT pg_advisory_xact_lock(:n, :a)")

    assert stmt._plain == "SELECT pg_advisory_xact_lock(%(n)s, %(a)s); SELECT %(a)s"


def test_an_asynchronous_commit_is_asked_for_in_the_same_round_trip_in_both_forms():
    stmt = PreparedStatement("s", "SELECT :a", synchronous_commit=False)

    assert stmt._execute == ("SET LOCAL synchronous_commit TO OFF; EXECUTE s(%s)")
    assert stmt._plain == "SET LOCAL synchronous_commit TO OFF; SELECT %(a)s"
