"""Celery, thin: the app and task wrappers that parse ids, call the engine and log outcomes."""
