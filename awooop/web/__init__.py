"""Flask: the app factory, the ingress and API blueprints, and JSON error handlers."""
