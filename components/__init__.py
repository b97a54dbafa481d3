"""Gradio UI: one module per tab or panel, each importing from the backend only ``backend.api`` (the facade and the
UI's vocabulary it re-exports); tests/unit/api/test_facade.py walks every import to keep it so."""
