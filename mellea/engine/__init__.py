"""Local inference engine: knows nothing of HTTP or mellea types."""
