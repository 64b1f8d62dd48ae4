def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b


def divide(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return a / b


def power(base, exp):
    result = 1
    for _ in range(exp):
        result *= base
    return result


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x
