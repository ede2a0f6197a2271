"""The ``m`` command line."""
