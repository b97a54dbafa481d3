"""Turns a JobSpec into a ready TRL trainer; one module per method, shared loading in ``models``."""
