def slugify(s):
    return "-".join(s.lower().split())


def word_count(s):
    return len(s.split())
