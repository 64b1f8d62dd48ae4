import unittest

from textkit import clamp, mean


class TestNumbers(unittest.TestCase):
    def test_clamp_low(self):
        self.assertEqual(clamp(-5, 0, 10), 0)

    def test_clamp_high(self):
        self.assertEqual(clamp(50, 0, 10), 10)

    def test_clamp_inside(self):
        self.assertEqual(clamp(5, 0, 10), 5)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3]), 2)
