"""Second of two."""
