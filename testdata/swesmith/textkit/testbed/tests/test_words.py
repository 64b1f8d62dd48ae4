import unittest

from textkit import count_words, truncate


class TestWords(unittest.TestCase):
    def test_count_words(self):
        self.assertEqual(count_words("a b  c"), 3)

    def test_count_empty(self):
        self.assertEqual(count_words(""), 0)

    def test_truncate_short(self):
        self.assertEqual(truncate("abc", 5), "abc")

    def test_truncate_long(self):
        self.assertEqual(truncate("abcdefgh", 6), "abc...")

    @unittest.skip("needs a locale")
    def test_count_locale(self):
        self.assertEqual(count_words("a\u3000b"), 2)
