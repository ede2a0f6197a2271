"""The standard library of a program: sessions, contexts, requirements, sampling."""
