"""The side-by-side chat and what users say about its answers."""
