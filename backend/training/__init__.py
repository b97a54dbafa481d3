"""Around a training run: pre-flight, auto-tune, memory, FLOPs, the meter, callbacks, evaluation and the preview."""
