"""A plugin whose import fails: the build says where."""

import proctor

SETTINGS = {"a": 1}


def read_settings():
    return SETTINGS["missing"]


LIMIT = read_settings()
