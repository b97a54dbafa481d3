"""Post-Training Studio backend: job spec, store, scheduler, worker and trainers; never imports gradio."""

from backend.platform import lean_imports

lean_imports.install()  # before anything here imports transformers (see backend/platform/lean_imports.py)
