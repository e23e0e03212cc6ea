"""The outbound side of each channel: where a run's messages go and how each provider is
called. Messages are written to the outbox (``awooop.store.outbox``) in the transaction that
causes them and sent later by ``awooop.engine.notify``."""
