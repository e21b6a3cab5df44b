"""A project whose build requirements are not installed."""
