def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)
