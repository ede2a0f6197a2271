"""Test program whose serve is not a function."""

serve = 42
