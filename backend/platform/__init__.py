"""The machine and the Space the studio runs on: hardware, Space runtime, interpreters, limits, tracking, Hub status."""
