"""The only code that issues SQL. Every statement that touches a table lives in this package.

Functions take the caller's SQLAlchemy ``Connection`` so they compose into one transaction,
and are named after what they do to the data (admit, claim, renew, record_step, complete,
fail, reap, resend_orphans, prune). Transitions are guarded in their WHERE clause; one that
matches no row returns ``None``/``False`` and the caller treats that as an event
(lease lost, already claimed), never as success.
"""
