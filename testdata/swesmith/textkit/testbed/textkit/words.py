def count_words(text):
    return len(text.split())


def truncate(text, width):
    if len(text) <= width:
        return text
    return text[: width - 3] + "..."
