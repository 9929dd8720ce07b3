"""The fields of a chunk file read as the values of their columns (the rules are listed in
:mod:`pipeline.ingest.files`), and the Arrow types they are written as: those Spark reads
back as the columns' Spark SQL types."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

from ..schema import Column

NULL = "\\N"
INT_TYPES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
FLOAT_MAX = 3.4028234663852886e38
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)
_BOOL = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


class Bad(Exception):
    """A field that does not fit its column (the message is the reason)."""


def converter(col: Column):
    """text -> value for column ``col`` (None for NULL), raising Bad."""
    t = col.type
    empty_is_value = t in ("string", "binary")
    convert = _value_reader(t)
    if convert is None:
        raise ValueError(f"column {col.name!r} has type {t!r}, which ingest cannot read")  # pragma: no cover

    def conv(text: str):
        if text == NULL or (not text and not empty_is_value):
            return None
        return convert(text)

    return conv


def _value_reader(t: str):
    """text (not NULL) -> value of Spark SQL type ``t``, raising Bad; None for a type
    ingest cannot read."""
    if t in INT_TYPES:
        return _integer(t)
    if t in ("float", "double"):
        return _real(t)
    if t in ("timestamp", "timestamp_ntz"):
        return _timestamp(t)
    simple = {"boolean": _boolean, "string": lambda text: text, "binary": _binary, "date": _date}
    if t in simple:
        return simple[t]
    m = _DECIMAL.fullmatch(t)
    if m:
        return _decimal(t, int(m.group(1)), int(m.group(2)))
    return None


def _integer(t: str):
    bits = INT_TYPES[t]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def integer(text):
        if not _INT.fullmatch(text):
            raise Bad(f"{text!r:.40} is not an integer")
        if len(text) > 24:  # far beyond 64 bits (and int() refuses over 4300 digits)
            raise Bad(f"{text!r:.40} is out of range for {t}")
        value = int(text)
        if not lo <= value <= hi:
            raise Bad(f"{text!r:.40} is out of range for {t}")
        return value

    return integer


def _real(t: str):
    def real(text):
        if not _FLOAT.fullmatch(text.strip()):
            raise Bad(f"{text!r:.40} is not a number")
        value = float(text)
        if math.isinf(value) and "inf" not in text.lower():  # a finite number too large: not infinity
            raise Bad(f"{text!r:.40} is out of range for {t}")
        if t == "float" and math.isfinite(value) and abs(value) > FLOAT_MAX:
            raise Bad(f"{text!r:.40} is out of range for float")
        return value

    return real


def _boolean(text):
    try:
        return _BOOL[text.strip().lower()]
    except KeyError:
        raise Bad(f"{text!r:.40} is not a boolean (true/false, t/f, 1/0)") from None


def _binary(text):
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise Bad(f"{text!r:.40} is not hexadecimal") from None


def _date(text):
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise Bad(f"{text!r:.40} is not a date (YYYY-MM-DD)") from None


def _timestamp(t: str):
    def timestamp(text):
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise Bad(f"{text!r:.40} is not an ISO 8601 timestamp") from None
        if t == "timestamp_ntz":
            if value.tzinfo is not None:
                raise Bad(f"{text!r:.40} has a time zone: timestamp_ntz values have none")
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)

    return timestamp


def _decimal(t: str, precision: int, scale: int):
    def dec(text):
        try:
            value = decimal.Decimal(text.strip())
        except decimal.InvalidOperation:
            raise Bad(f"{text!r:.40} is not a decimal number") from None
        if not value.is_finite():
            raise Bad(f"{text!r:.40} is not a finite decimal")
        if abs(value) >= decimal.Decimal(10) ** (precision - scale):
            raise Bad(f"{text!r:.40} has more than {precision - scale} integer digits for {t}")
        # below 10**38 now: quantizing needs at most 38 + scale digits
        if value != value.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=100)):
            raise Bad(f"{text!r:.40} has more than {scale} fraction digits for {t}")
        return value

    return dec


def arrow_type(t: str):
    """The Arrow type Spark reads back as the Spark SQL type ``t``."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if t in simple:
        return simple[t]
    m = _DECIMAL.fullmatch(t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"no Arrow type for {t!r}")  # pragma: no cover


def arrow_schema(columns):
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns])
