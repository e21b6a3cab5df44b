"""Text helpers of the demo engine."""


def word_count(text):
    """How many words `text` holds: runs of whitespace separate them."""
    return len(text.split())
