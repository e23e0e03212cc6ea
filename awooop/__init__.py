"""AwoooP: operations events admitted exactly once, executed as durable leased runs."""

__version__ = "0.2.0"
