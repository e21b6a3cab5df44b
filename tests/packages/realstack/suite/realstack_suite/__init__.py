"""Quantization recipes (realstack)."""
