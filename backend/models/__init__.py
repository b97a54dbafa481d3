"""Models outside a trainer: loading, the built-in demo models, inference, base and tuned in one batch, and scoring."""
