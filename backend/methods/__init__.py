"""The training methods: one module each (trainer, scoring, preview), the method table, shared set-up, rewards."""
