"""Executing runs and the maintenance passes, over domain + store. Knows nothing of Celery."""
