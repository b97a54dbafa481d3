"""Gradio UI: one module per tab; each reaches the backend only through ``backend.api.StudioAPI``."""
