"""The PostgreSQL types the wire layer speaks: result values to text or binary format, and bound parameters
(text or binary) to SQL literals.

Result columns have one of nine types (``TYPES``). Text format follows PostgreSQL's output functions: booleans
``t``/``f``, floats as the shortest text that reads back to the same double (``NaN``, ``Infinity``,
``-Infinity``), numerics in plain notation, dates and timestamps in ISO style. Binary format follows each type's
``send`` function (numeric as base-10000 digits, dates and timestamps counted from 2000-01-01).

A parameter becomes a literal that cannot change the statement's structure: a number (validated, and wrapped
in parentheses when negative so ``x-$1`` cannot become a ``--`` comment) for the numeric types, ``TRUE`` or
``FALSE`` for booleans, ``DATE '...'`` / ``TIMESTAMP '...'`` for dates and timestamps, and a single-quoted
string with ``'`` doubled for everything else (``standard_conforming_strings`` is on, so backslashes are
ordinary characters). A value that is not of its declared type is a :class:`PgError` with PostgreSQL's SQLSTATE.
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from collections.abc import Callable
from decimal import Decimal

from dpsql.server.pgerror import PgError

# result type name -> (type OID, typlen)
TYPES = {
    "bool": (16, 1), "int2": (21, 2), "int4": (23, 4), "int8": (20, 8), "float8": (701, 8),
    "numeric": (1700, -1), "text": (25, -1), "date": (1082, 4), "timestamp": (1114, 8),
}
UNKNOWN, TEXT, FLOAT4 = 0, 25, 700
_PARAM_NAMES = {oid: name for name, (oid, _) in TYPES.items()} | {FLOAT4: "float4", 1043: "text", 1042: "text",
                                                                     705: "text", UNKNOWN: "text"}
_INT_RANGE = {"int2": 15, "int4": 31, "int8": 63}
_EPOCH_DATE = datetime.date(2000, 1, 1)
_EPOCH = datetime.datetime(2000, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)
_NUMERIC_NAN, _NUMERIC_POS_INF, _NUMERIC_NEG_INF, _NUMERIC_NEG = 0xC000, 0xD000, 0xF000, 0x4000
# PostgreSQL's numeric holds up to 131072 digits before the point and 16383 after
_MAX_NUMERIC_ADJUSTED, _MIN_NUMERIC_EXPONENT = 131071, -16383
_INFINITE_FLOATS = {math.inf: "Infinity", -math.inf: "-Infinity"}

Encoder = Callable[[object], bytes]


def parameter_oid(oid: int) -> int:
    """The OID a ParameterDescription reports: the declared one, or text for an unspecified one."""
    return TEXT if oid in (UNKNOWN, 705) else oid


def encoders(types: list[str], formats: list[int]) -> list[Encoder]:
    """One encoder per column (``formats[i]`` 0 text, 1 binary) turning a non-NULL value into its bytes."""
    return [(_BINARY if fmt else _TEXT)[name] for name, fmt in zip(types, formats)]


def data_rows(rows: list[tuple], coders: list[Encoder]) -> bytes:
    """The DataRow messages for ``rows``."""
    out = bytearray()
    null = b"\xff\xff\xff\xff"
    for row in rows:
        body = bytearray(len(coders).to_bytes(2, "big"))
        for value, coder in zip(row, coders):
            if value is None:
                body += null
            else:
                data = coder(value)
                body += len(data).to_bytes(4, "big") + data
        out += b"D" + (len(body) + 4).to_bytes(4, "big") + body
    return bytes(out)


def literal(oid: int, binary: bool, data: bytes | None) -> str:
    """The SQL literal for one bound parameter of declared type ``oid``; ``data`` None is NULL."""
    if data is None:
        return "NULL"
    name = _PARAM_NAMES.get(oid)
    if binary:
        if name is None:
            raise PgError("0A000", f"binary format is not supported for parameters of type OID {oid}; send text")
        value = _decode_binary(name, data)
    else:
        value = _utf8(data)
        if name is None:
            return _quote(value)
        value = _parse_text(name, value)
    return _literal(value)


def _text_float(value: object) -> bytes:
    f = float(value)
    if f != f:
        return b"NaN"
    text = _INFINITE_FLOATS.get(f) or repr(f)
    return (text[:-2] if text.endswith(".0") else text).encode()


def _as_decimal(value: object) -> Decimal:
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else Decimal(value)
    return value if isinstance(value, Decimal) else Decimal(value)


def _text_numeric(value: object) -> bytes:
    d = _as_decimal(value)
    if d.is_nan():
        return b"NaN"
    if d.is_infinite():
        return b"-Infinity" if d < 0 else b"Infinity"
    return format(d.copy_abs() if d.is_zero() else d, "f").encode()


def _naive(value: datetime.datetime) -> datetime.datetime:
    if value.tzinfo is None:
        return value
    return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)


def _as_date(value: object) -> datetime.date:
    return value.date() if isinstance(value, datetime.datetime) else value


def _as_timestamp(value: object) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return _naive(value)
    return datetime.datetime.combine(value, datetime.time())


_TEXT: dict[str, Encoder] = {
    "bool": lambda v: b"t" if v else b"f",
    "int2": lambda v: str(int(v)).encode(),
    "int4": lambda v: str(int(v)).encode(),
    "int8": lambda v: str(int(v)).encode(),
    "float8": _text_float,
    "numeric": _text_numeric,
    "text": lambda v: str(v).encode(),
    "date": lambda v: _as_date(v).isoformat().encode(),
    "timestamp": lambda v: _as_timestamp(v).isoformat(sep=" ").encode(),
}


def _binary_numeric(value: object) -> bytes:
    d = _as_decimal(value)
    if d.is_nan():
        return struct.pack(">hhHh", 0, 0, _NUMERIC_NAN, 0)
    if d.is_infinite():
        return struct.pack(">hhHh", 0, 0, _NUMERIC_NEG_INF if d < 0 else _NUMERIC_POS_INF, 0)
    sign, digits, exponent = d.as_tuple()
    aligned = exponent // 4 * 4  # the base-10000 digit boundary at or below the last decimal digit
    magnitude = int("".join(map(str, digits)) or "0") * 10 ** (exponent - aligned)
    groups = []
    while magnitude:
        magnitude, group = divmod(magnitude, 10000)
        groups.append(group)
    groups.reverse()
    weight = len(groups) - 1 + aligned // 4 if groups else 0
    while groups and groups[-1] == 0:
        groups.pop()
    flag = _NUMERIC_NEG if sign and groups else 0
    return struct.pack(f">hhHh{len(groups)}H", len(groups), weight, flag, max(0, -exponent), *groups)


_BINARY: dict[str, Encoder] = {
    "bool": lambda v: b"\x01" if v else b"\x00",
    "int2": lambda v: struct.pack(">h", v),
    "int4": lambda v: struct.pack(">i", v),
    "int8": lambda v: struct.pack(">q", v),
    "float8": lambda v: struct.pack(">d", v),
    "numeric": _binary_numeric,
    "text": lambda v: str(v).encode(),
    "date": lambda v: struct.pack(">i", (_as_date(v) - _EPOCH_DATE).days),
    "timestamp": lambda v: struct.pack(">q", (_as_timestamp(v) - _EPOCH) // _MICROSECOND),
}


def _utf8(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PgError("22021", 'invalid byte sequence for encoding "UTF8" in a parameter') from None
    if "\x00" in text:
        raise PgError("22021", 'invalid byte sequence for encoding "UTF8": 0x00 in a parameter')
    return text


def _invalid(name: str, text: str) -> PgError:
    shown = text if len(text) <= 40 else text[:40] + "..."
    return PgError("22P02", f'invalid input syntax for type {name}: "{shown}"')


def _check_int(name: str, value: int) -> int:
    bits = _INT_RANGE[name]
    if not -(1 << bits) <= value < (1 << bits):
        raise PgError("22003", f"value out of range for parameter of type {name}")
    return value


def _check_numeric(value: Decimal) -> Decimal:
    if value.is_finite() and (value.adjusted() > _MAX_NUMERIC_ADJUSTED or value.as_tuple().exponent
                              < _MIN_NUMERIC_EXPONENT):
        raise PgError("22003", "value out of range for parameter of type numeric")
    return value


def _parse_text(name: str, text: str) -> object:
    """The Python value of a text-format parameter of type ``name`` (text, dates and timestamps stay text)."""
    stripped = text.strip()
    try:
        if name in _INT_RANGE:
            if len(stripped) > 30:
                raise PgError("22003", f"value out of range for parameter of type {name}")
            return _check_int(name, int(stripped))
        if name in ("float4", "float8"):
            return float(stripped)
        if name == "numeric":
            return _check_numeric(Decimal(stripped))
    except (ValueError, decimal.InvalidOperation):
        raise _invalid(name, text) from None
    if name == "bool":
        lowered = stripped.lower()
        if lowered in ("t", "true", "y", "yes", "on", "1"):
            return True
        if lowered in ("f", "false", "n", "no", "off", "0"):
            return False
        raise _invalid("boolean", text)
    if name == "date":
        return _Typed("DATE", text)
    if name == "timestamp":
        return _Typed("TIMESTAMP", text)
    return text


def _decode_binary(name: str, data: bytes) -> object:
    """The Python value of a binary-format parameter of type ``name``."""
    sizes = {"bool": 1, "int2": 2, "int4": 4, "int8": 8, "float4": 4, "float8": 8, "date": 4, "timestamp": 8}
    if name in sizes and len(data) != sizes[name]:
        raise PgError("22P03", f"incorrect binary data format in a parameter of type {name}: "
                               f"{len(data)} bytes, expected {sizes[name]}")
    if name == "bool":
        return data != b"\x00"
    if name in _INT_RANGE:
        return int.from_bytes(data, "big", signed=True)
    if name in ("float4", "float8"):
        return struct.unpack(">f" if name == "float4" else ">d", data)[0]
    if name == "numeric":
        return _decode_numeric(data)
    if name == "date":
        try:
            return _Typed("DATE", (_EPOCH_DATE + datetime.timedelta(days=struct.unpack(">i", data)[0])).isoformat())
        except OverflowError:
            raise PgError("22008", "date parameter out of the supported range") from None
    if name == "timestamp":
        try:
            value = _EPOCH + struct.unpack(">q", data)[0] * _MICROSECOND
        except OverflowError:
            raise PgError("22008", "timestamp parameter out of the supported range") from None
        return _Typed("TIMESTAMP", value.isoformat(sep=" "))
    return _utf8(data)


def _decode_numeric(data: bytes) -> Decimal:
    if len(data) < 8:
        raise PgError("22P03", "incorrect binary data format in a numeric parameter: shorter than its header")
    count, weight, flag, scale = struct.unpack(">hhHh", data[:8])
    if count < 0 or len(data) != 8 + 2 * count:
        raise PgError("22P03", "incorrect binary data format in a numeric parameter: wrong digit count")
    specials = {_NUMERIC_NAN: "NaN", _NUMERIC_POS_INF: "Infinity", _NUMERIC_NEG_INF: "-Infinity"}
    if flag in specials:
        return Decimal(specials[flag])
    groups = struct.unpack(f">{count}H", data[8:])
    if flag not in (0, _NUMERIC_NEG) or any(g >= 10000 for g in groups) or not 0 <= scale <= -_MIN_NUMERIC_EXPONENT:
        raise PgError("22P03", "incorrect binary data format in a numeric parameter: invalid sign, digit or scale")
    digits = tuple(int(c) for c in "".join(f"{g:04d}" for g in groups)) or (0,)
    return _check_numeric(Decimal((1 if flag else 0, digits, 4 * (weight - count + 1))))


class _Typed:
    """A value written as a typed string literal, ``DATE '2024-01-31'``."""

    def __init__(self, keyword: str, text: str) -> None:
        self.keyword = keyword
        self.text = text


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _literal(value: object) -> str:
    """SQL text for a parsed parameter value."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return f"{_quote(_text_float(value).decode())}::float8"
        return repr(value) if math.copysign(1.0, value) > 0 else f"({value!r})"
    if isinstance(value, Decimal):
        if not value.is_finite():
            return f"{_quote(_text_numeric(value).decode())}::numeric"
        text = _text_numeric(value).decode()
        return f"({text})" if text.startswith("-") else text
    if isinstance(value, _Typed):
        return f"{value.keyword} {_quote(value.text)}"
    return _quote(value)
