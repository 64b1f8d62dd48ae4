"""A plugin that calls the host while it is imported: the build refuses it
and says why."""

import proctor

BACKEND = proctor.info().backend
