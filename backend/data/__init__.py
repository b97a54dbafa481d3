"""Datasets: built-in ones, loading and column mapping, the arithmetic recipe, and uploads with their limits."""
