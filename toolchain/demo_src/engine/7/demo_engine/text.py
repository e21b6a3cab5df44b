"""Text helpers of the demo engine."""


def word_count(text):
    """How many words `text` holds, counted by the spaces between them (no list is built)."""
    return text.count(" ") + 1 if text else 0


def truncate(text, limit):
    """`text` cut to at most `limit` characters."""
    return text[:limit]
