"""Data types of the intrinsics' input and output code (none of its own yet, as upstream)."""
