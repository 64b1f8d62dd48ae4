"""Strict decoding of a run's config table into a schema class (see
proctor.decode_config). Imported only by plugins that call it."""

from __future__ import annotations

import copy
import difflib
import sys

from proctor import ConfigError, _json_type

_MISSING = object()


def decode(raw, schema):
    if isinstance(raw, (bytes, bytearray, str)):
        import json

        try:
            raw = json.loads(raw) if raw else None
        except ValueError as e:
            raise ConfigError(f"config is not JSON: {e}") from None
    if not isinstance(schema, type):
        raise TypeError(f"decode_config: schema must be a class, not {type(schema).__name__}")
    return _object(raw, schema, "")


def _fields(schema) -> dict:
    """The schema's keys: name → (type annotation, default or _MISSING)."""
    dc = getattr(schema, "__dataclass_fields__", None)
    if dc is not None:
        import dataclasses

        out = {}
        for f in dataclasses.fields(schema):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = _MISSING
            out[f.name] = (f.type, default)
        return out
    out = {}
    for klass in reversed(schema.__mro__[:-1]):
        for name, ann in getattr(klass, "__annotations__", {}).items():
            if name.startswith("_"):
                continue
            out[name] = (ann, copy.deepcopy(getattr(schema, name, _MISSING)))
    if not out:
        raise TypeError(f"decode_config: {schema.__name__} has no annotated fields (write them as `name: type = default`)")
    return out


def _object(raw, schema, where):
    fields = _fields(schema)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: want a table, got {_json_type(raw)}")
    for key in raw:
        if key not in fields:
            known = ", ".join(sorted(fields))
            near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            mean = f"; did you mean {_path(where, near[0])!r}?" if near else ""
            raise ConfigError(f"unknown key {_path(where, key)!r}{mean} (known keys: {known})")
    values = {}
    for name, (ann, default) in fields.items():
        key = _path(where, name)
        if name in raw:
            values[name] = _value(raw[name], _resolve(ann, schema), key)
        elif default is _MISSING:
            raise ConfigError(f"missing key {key!r}")
        else:
            values[name] = default
    if hasattr(schema, "__dataclass_fields__"):
        return schema(**values)
    obj = schema.__new__(schema)
    for name, value in values.items():
        setattr(obj, name, value)
    return obj


def _path(where, key):
    return f"{where}.{key}" if where else str(key)


def _resolve(ann, schema):
    """An annotation as a type: strings (from `from __future__ import
    annotations`) are parsed for the forms decode understands."""
    if isinstance(ann, str):
        return _parse(ann.strip(), schema)
    return ann


_BASIC = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict, "Any": object, "object": object, "typing.Any": object}


def _parse(s, schema):
    parts = _split(s, "|")
    if len(parts) > 1:
        return ("union", [_parse(p, schema) for p in parts])
    if s in ("None", "NoneType"):
        return type(None)
    if s in _BASIC:
        return _BASIC[s]
    head, _, rest = s.partition("[")
    if rest:
        args = [_parse(a, schema) for a in _split(rest[:-1], ",")]
        head = head.strip().rsplit(".", 1)[-1]
        if head in ("list", "List", "Sequence"):
            return ("list", args[0])
        if head in ("dict", "Dict", "Mapping"):
            return ("dict", args[-1])
        if head == "Optional":
            return ("union", [args[0], type(None)])
        if head == "Union":
            return ("union", args)
        raise TypeError(f"decode_config: annotation {s!r} is not one decode_config understands")
    # A class: nested schemas, looked up where the schema was defined.
    mod = sys.modules.get(schema.__module__)
    ns = dict(vars(mod)) if mod else {}
    ns.update({c.__name__: c for c in vars(schema).values() if isinstance(c, type)})
    obj = ns.get(s)
    if isinstance(obj, type):
        return obj
    raise TypeError(f"decode_config: annotation {s!r} is not one decode_config understands")


def _split(s, sep):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _value(v, t, key):
    origin = getattr(t, "__origin__", None)
    if origin is not None:  # typing and builtin generics: list[str], dict[str, int], Optional[int]
        args = getattr(t, "__args__", ())
        name = getattr(origin, "__name__", str(origin))
        if origin is list or name in ("Sequence",):
            t = ("list", args[0] if args else object)
        elif origin is dict or name in ("Mapping",):
            t = ("dict", args[-1] if args else object)
        elif name in ("Union", "UnionType") or str(origin) == "typing.Union":
            t = ("union", list(args))
    elif type(t).__name__ == "UnionType":  # int | None
        t = ("union", list(t.__args__))
    if isinstance(t, tuple):
        kind, arg = t
        if kind == "union":
            if v is None and type(None) in arg:
                return None
            errors = []
            for a in arg:
                if a is type(None):
                    continue
                try:
                    return _value(v, a, key)
                except ConfigError as e:
                    errors.append(str(e))
            raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {_json_type(v)} fits none of its types")
        if kind == "list":
            if not isinstance(v, list):
                raise ConfigError(f"{key}: want an array, got {_json_type(v)}")
            return [_value(x, arg, f"{key}[{i}]") for i, x in enumerate(v)]
        if not isinstance(v, dict):
            raise ConfigError(f"{key}: want a table, got {_json_type(v)}")
        return {k: _value(x, arg, f"{key}.{k}") for k, x in v.items()}
    if t is object:
        return v
    if t is type(None):
        if v is not None:
            raise ConfigError(f"{key}: want null, got {_json_type(v)}")
        return None
    if t is bool:
        if not isinstance(v, bool):
            raise ConfigError(f"{key}: want true or false, got {_json_type(v)}")
        return v
    if t is int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ConfigError(f"{key}: want an integer, got {_json_type(v)} {_show(v)}")
        return v
    if t is float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ConfigError(f"{key}: want a number, got {_json_type(v)} {_show(v)}")
        return float(v)
    if t is str:
        if not isinstance(v, str):
            raise ConfigError(f"{key}: want a string, got {_json_type(v)}")
        return v
    if t is list:
        if not isinstance(v, list):
            raise ConfigError(f"{key}: want an array, got {_json_type(v)}")
        return v
    if t is dict:
        if not isinstance(v, dict):
            raise ConfigError(f"{key}: want a table, got {_json_type(v)}")
        return v
    if isinstance(t, type):
        return _object(v, t, key)
    raise TypeError(f"decode_config: annotation {t!r} of {key} is not one decode_config understands")


def _show(v):
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
