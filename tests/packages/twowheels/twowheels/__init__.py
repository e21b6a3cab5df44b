"""First of two."""
