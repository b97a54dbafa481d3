"""Post-Training Studio backend: job spec, store, scheduler, worker and trainers; never imports gradio."""
