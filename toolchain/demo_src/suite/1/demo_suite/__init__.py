"""Quantization recipes (demo)."""
