"""A tiny calculator package, the SWE-smith fixture repository."""
from .ops import add, subtract, multiply, divide, power, clamp
from .text import slugify, word_count

__all__ = ["add", "subtract", "multiply", "divide", "power", "clamp", "slugify", "word_count"]
