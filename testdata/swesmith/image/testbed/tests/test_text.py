from calc import slugify, word_count


def test_slugify():
    assert slugify("Hello World") == "hello-world"


def test_slugify_spaces():
    assert slugify("  a   b ") == "a-b"


def test_word_count():
    assert word_count("one two three") == 3
