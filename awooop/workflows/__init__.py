"""Workflow definitions: the registry and the built-in workflows."""
