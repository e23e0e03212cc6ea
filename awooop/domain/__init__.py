"""Pure logic: no Flask, Celery or SQLAlchemy imports below this package."""
