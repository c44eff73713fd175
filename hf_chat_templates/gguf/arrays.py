"""A GGUF file's array values, read lazily: memory bounded by the file's own bytes.

A metadata array (a vocabulary of 150,000 strings, or one of a hostile file's 50 million integers) made into a
Python tuple costs about 36 bytes an integer and 60 a string, ten times the file. Here an array keeps the file's
bytes of it once: numbers in an `array.array` of the item's own width, strings as the raw bytes plus one 8-byte
offset per item, decoded when read. Both are read-only sequences equal to any sequence of the same items.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Iterator, Sequence
from typing import Any, overload

# GGUF scalar item type -> array typecode (a bool is a byte, read as bool)
_TYPECODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
_BOOL = 7
_NATIVE = "<" if sys.byteorder == "little" else ">"


class LazyArray(Sequence[Any]):
    """A read-only sequence; equal to a list or tuple (or another array) with the same items."""

    def _item(self, index: int) -> Any:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("array index out of range")
        return self._item(index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (LazyArray, list, tuple)) or len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} items>"


class NumberArray(LazyArray):
    def __init__(self, raw: bytes | memoryview, item: int, order: str) -> None:
        self._values = array.array(_TYPECODES[item])
        self._values.frombytes(raw)
        if order != _NATIVE and self._values.itemsize > 1:
            self._values.byteswap()
        self._bool = item == _BOOL

    def __len__(self) -> int:
        return len(self._values)

    def _item(self, index: int) -> Any:
        value = self._values[index]
        return bool(value) if self._bool else value

    def __iter__(self) -> Iterator[Any]:
        return (bool(v) for v in self._values) if self._bool else iter(self._values)


class StringArray(LazyArray):
    """Strings as the file stores them (an 8-byte length, then UTF-8), each checked once and decoded when read."""

    def __init__(self, raw: bytes, offsets: array.array[int]) -> None:
        self._raw, self._offsets = raw, offsets  # offsets[i]: where string i's bytes start; its end is the next length

    def __len__(self) -> int:
        return len(self._offsets)

    def _item(self, index: int) -> str:
        start = self._offsets[index]
        end = self._offsets[index + 1] - 8 if index + 1 < len(self._offsets) else len(self._raw)
        return self._raw[start:end].decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        return (self._item(i) for i in range(len(self)))
