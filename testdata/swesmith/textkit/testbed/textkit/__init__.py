"""Small text and number helpers, the SWE-smith unittest fixture repository."""
from .numbers import clamp, mean
from .words import count_words, truncate

__all__ = ["clamp", "mean", "count_words", "truncate"]
