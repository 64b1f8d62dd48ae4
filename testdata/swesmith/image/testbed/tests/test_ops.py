import pytest

from calc import add, subtract, multiply, divide, power, clamp


def test_add():
    assert add(2, 3) == 5


def test_subtract():
    assert subtract(5, 3) == 2


def test_multiply():
    assert multiply(4, 3) == 12


def test_divide():
    assert divide(9, 3) == 3


def test_divide_by_zero():
    with pytest.raises(ZeroDivisionError):
        divide(1, 0)


def test_power():
    assert power(2, 10) == 1024


def test_power_zero():
    assert power(7, 0) == 1


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(15, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
