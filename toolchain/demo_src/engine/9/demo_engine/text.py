"""Text helpers of the demo engine."""


def word_count(text):
    """How many words `text` holds, counted by the spaces between them (no list is built)."""
    return text.count(" ") + 1 if text else 0


def truncate(text, limit):
    """`text` cut to at most `limit` characters, at a word boundary where there is one."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut
