"""Orchestration across the backend for the facade: flows that play an environment, keep files and queue jobs."""
