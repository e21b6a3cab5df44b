"""Built under another name."""
