"""The two facts of a shared library's dynamic section the GPU doctor needs: the libraries it names as
needed (`DT_NEEDED`) and where it tells the loader to look (`DT_RUNPATH`, else `DT_RPATH`), read from
the file without loading it (what `readelf -d` prints). TensorFlow's CUDA build finds pip's
`nvidia-*-cu12` wheels through the run path of its own `.so` files (`$ORIGIN/../nvidia/cublas/lib`), and a
CUDA library tells which CUDA it belongs to by the sonames it needs (`libnvJitLink.so.13`).

Example:
    >>> import sys
    >>> from tfplace.machine._elf import dynamic
    >>> dynamic(sys.executable).needed is not None or sys.platform != "linux"
    True
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Optional

__all__ = ["Dynamic", "dynamic", "run_path"]

_SHT_DYNAMIC, _DT_NULL, _DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 6, 0, 1, 15, 29


@dataclasses.dataclass(frozen=True)
class Dynamic:
    """A library's `DT_NEEDED` sonames and its run path (directories, `$ORIGIN` expanded); `needed` is None
    for a file that is not a 64-bit little-endian ELF file (or cannot be read)."""

    needed: Optional[tuple[str, ...]]
    run_path: tuple[str, ...] = ()


def dynamic(path: str) -> Dynamic:
    """`path`'s dynamic section (see `Dynamic`); never raises."""
    try:
        with open(path, "rb") as file:
            return _read(file, os.path.dirname(os.path.realpath(path)))
    except (OSError, struct.error, ValueError):
        return Dynamic(None)


def run_path(paths: list[str]) -> list[str]:
    """The run-path directories of `paths`, in order, each once, existing or not."""
    return list(dict.fromkeys(entry for path in paths for entry in dynamic(path).run_path))


def _read(file: "object", origin: str) -> Dynamic:
    read, seek = file.read, file.seek  # type: ignore[attr-defined]
    header = read(64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return Dynamic(None)
    section_offset, = struct.unpack_from("<Q", header, 0x28)
    entry_size, count = struct.unpack_from("<HH", header, 0x3A)
    seek(section_offset)
    table = read(entry_size * count)
    sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * entry_size) for i in range(count)]
    for _name, kind, _flags, _address, offset, size, link, _info, _align, _entry in sections:
        if kind != _SHT_DYNAMIC:
            continue
        seek(offset)
        entries = read(size)
        strings_offset, strings_size = sections[link][4], sections[link][5]
        seek(strings_offset)
        strings = read(strings_size)

        def text(index: int) -> str:
            return strings[index:strings.index(b"\0", index)].decode("utf-8", "replace")

        needed, runpath, rpath = [], "", ""
        for tag, value in struct.iter_unpack("<qQ", entries[: len(entries) // 16 * 16]):
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                needed.append(text(value))
            elif tag == _DT_RUNPATH:
                runpath = text(value)
            elif tag == _DT_RPATH:
                rpath = text(value)
        directories = tuple(os.path.normpath(entry.replace("$ORIGIN", origin).replace("${ORIGIN}", origin))
                            for entry in (runpath or rpath).split(":") if entry)
        return Dynamic(tuple(needed), directories)
    return Dynamic((), ())
