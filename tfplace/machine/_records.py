"""The facts format `tfplace-machine/1` as declared types: `MachineFacts` and the records it holds, each
field named and typed once. Reading JSON (`from_json`) checks every key against those declarations and
says what was received, what the format allows there and in which file; writing (`to_json`) gives the
format's keys in the format's order. Records are frozen, their mappings read-only.

Example:
    >>> facts = MachineFacts.from_json({"format": "tfplace-machine/1", "python": "3.12.3", "driver": None,
    ...     "platform": {"system": "Linux", "release": "6.8", "machine": "x86_64", "wsl": False}, "gpus": [],
    ...     "tensorflow": None, "libraries": {}, "environment": {"CUDA_VISIBLE_DEVICES": None}}, "here.json")
    >>> facts.platform.system, facts.to_json()["environment"]
    ('Linux', {'CUDA_VISIBLE_DEVICES': None})
    >>> Gpu.from_json({"index": "0", "name": "NVIDIA H200"}, "h200.json")
    Traceback (most recent call last):
    ...
    tfplace.machine._records.FactsError: h200.json: 'index' is a str ('0'); tfplace-machine/1 allows an int there
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import json
import os
import types
import typing
from typing import Any, ClassVar, Mapping, Optional, TypeVar, Union

from tfplace import _files
from tfplace._errors import Error

__all__ = ["FORMAT", "FactsError", "Record", "Platform", "Driver", "Gpu", "BuildInfo", "TensorFlow", "Library",
           "Wheel", "Run", "View", "MachineFacts"]

FORMAT = "tfplace-machine/1"
_OMIT = {"omit": True}  # a field's metadata: written only when it holds a value (keys that are there or not)
_R = TypeVar("_R", bound="Record")


class FactsError(Error, ValueError):
    """A facts file that cannot be read, is not JSON, has another format or lacks a key."""


def _empty() -> Mapping[str, Any]:
    return types.MappingProxyType({})


def _received(value: object) -> str:
    if value is None:
        return "null"
    shown = repr(value)
    return f"{_NAMES.get(type(value), type(value).__name__)} ({shown if len(shown) <= 60 else shown[:57] + '...'})"


_NAMES: dict[object, str] = {str: "a str", int: "an int", float: "a number", bool: "a bool", type(None): "null",
                             list: "a list", dict: "an object", tuple: "a list", Any: "any value"}


def _allowed(kind: Any) -> str:
    """The words for what a declared type allows (`"a str or null"`)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:
        return " or ".join(_allowed(arg) for arg in args)
    if origin is tuple:
        return f"a list of {_allowed(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is collections.abc.Mapping:
        return f"an object of {_allowed(args[1]).removeprefix('a ').removeprefix('an ')}s"
    if isinstance(kind, type) and issubclass(kind, Record):
        return "an object"
    return _NAMES.get(kind, str(kind))


def _fail(where: str, key: str, value: object, kind: Any) -> FactsError:
    return FactsError(f"{where}: {key!r} is {_received(value)}; {FORMAT} allows {_allowed(kind)} there")


def _decode(kind: Any, value: object, where: str, key: str) -> Any:
    """`value` (JSON) as the declared type `kind`, else a `FactsError` naming `where` and `key`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return copy.deepcopy(value)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) == 1 and _shaped(inner[0], value):  # what is inside is checked, and named, there
            return _decode(inner[0], value, where, key)
    elif origin is tuple and isinstance(value, (list, tuple)):
        return tuple(_decode(args[0], item, where, f"{key}[{i}]") for i, item in enumerate(value))
    elif origin is collections.abc.Mapping and isinstance(value, dict):
        return types.MappingProxyType({name: _decode(args[1], item, where, f"{key}[{name!r}]")
                                       for name, item in value.items()})
    elif isinstance(kind, type) and issubclass(kind, Record):
        return kind.decode(value, where, key)
    elif kind is float and _shaped(kind, value):
        return float(value)  # type: ignore[arg-type]
    elif kind in (str, int, bool) and _shaped(kind, value):
        return value
    raise _fail(where, key, value, kind)


def _shaped(kind: Any, value: object) -> bool:
    """Whether `value` is the JSON kind (object, list, str, number, bool) that `kind` is written as."""
    origin = typing.get_origin(kind)
    if origin is tuple:
        return isinstance(value, (list, tuple))
    if origin is collections.abc.Mapping or (isinstance(kind, type) and issubclass(kind, Record)):
        return isinstance(value, dict)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return kind is Any or (isinstance(value, kind) and (kind is bool or not isinstance(value, bool)))


def _encode(value: object) -> Any:
    """A record's value as JSON (lists for tuples, dicts for mappings)."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    if isinstance(value, Mapping):
        return {name: _encode(item) for name, item in value.items()}
    return copy.deepcopy(value)


_DECLARED: dict[type[Record], tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


def _fields(cls: type[Record]) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """A record's fields with their declared types."""
    if cls not in _DECLARED:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        _DECLARED[cls] = tuple((field, hints[field.name]) for field in fields)
    return _DECLARED[cls]


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


class Record:
    """A JSON object of the facts format as a frozen dataclass: its fields are the object's keys (those
    without a default are required), their types what each key holds; keys it does not declare are ignored."""

    @classmethod
    def from_json(cls: type[_R], data: object, where: str = "facts") -> _R:
        """`data` as this record, checked (`FactsError` naming `where`, the key, what it is and may be)."""
        return cls.decode(data, where, "")

    @classmethod
    def decode(cls: type[_R], data: object, where: str, key: str) -> _R:
        if not isinstance(data, dict):
            raise FactsError(f"{where}: {repr(key) + ' is ' if key else ''}{_received(data)}, where {FORMAT} has "
                             "an object")
        fields = _fields(cls)
        needed = [field.name for field, _ in fields if _required(field)]
        for name in needed:
            if name not in data:
                raise FactsError(f"{where}: the key {_join(key, name)!r} is missing ({FORMAT} needs "
                                 f"{', '.join(needed)}{' in ' + repr(key) if key else ''})")
        record = cls(**{field.name: _decode(kind, data[field.name], where, _join(key, field.name))
                        for field, kind in fields if field.name in data and not (
                            data[field.name] is None and field.metadata.get("omit"))})
        absent = frozenset(field.name for field, _ in fields if field.name not in data)
        if absent:  # written back as they came: an optional key that was not there stays out
            object.__setattr__(record, "_absent", absent)
        return record

    def to_json(self) -> dict[str, Any]:
        """The record as the format writes it."""
        absent: frozenset[str] = getattr(self, "_absent", frozenset())
        return {field.name: _encode(getattr(self, field.name)) for field, _ in _fields(type(self))
                if field.name not in absent and not (field.metadata.get("omit") and getattr(self, field.name) is None)}


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


@dataclasses.dataclass(frozen=True)
class Platform(Record):
    """The operating system (`platform.system()`: `"Linux"`), its release, the machine (`"x86_64"`), whether
    it is WSL2, the container it runs in (`"docker"`, None) and the `/dev/nvidia*` files it has."""

    system: str
    release: str
    machine: str
    wsl: bool
    container: Optional[str] = None
    dev_nvidia: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Driver(Record):
    """The NVIDIA driver: its version (`"580.159.04"`) and the newest CUDA it runs (`"13.0"`)."""

    version: Optional[str]
    cuda: Optional[str]


@dataclasses.dataclass(frozen=True)
class Gpu(Record):
    """A GPU as the driver numbers it, with its memory in MiB and compute capability (`"9.0"`)."""

    index: int
    name: str
    memory_mib: Optional[int] = None
    uuid: Optional[str] = None
    compute_capability: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class BuildInfo(Record):
    """TensorFlow's build info as the build wrote it (`info`: its keys, kept as they are); the keys the doctor
    reads, typed: `is_cuda_build`, `cuda_version` (`"12.5.1"`), `cudnn_version` (`"9"`) and
    `capabilities` (its `cuda_compute_capabilities`: `sm_XY` machine code, `compute_XY` PTX)."""

    info: Mapping[str, Any] = dataclasses.field(default_factory=_empty)
    _TYPES: ClassVar[dict[str, Any]] = {"is_cuda_build": Optional[bool], "cuda_version": Optional[str],
                                        "cudnn_version": Optional[str],
                                        "cuda_compute_capabilities": Optional[tuple[str, ...]]}

    @classmethod
    def decode(cls, data: object, where: str, key: str) -> BuildInfo:
        if not isinstance(data, dict):
            raise _fail(where, key, data, Mapping[str, Any])
        for name, kind in cls._TYPES.items():
            _decode(kind, data.get(name), where, _join(key, name))
        return cls(types.MappingProxyType(copy.deepcopy(data)))

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.info))

    @property
    def is_cuda_build(self) -> bool:
        return bool(self.info.get("is_cuda_build"))

    @property
    def cuda_version(self) -> Optional[str]:
        return self.info.get("cuda_version")

    @property
    def cudnn_version(self) -> Optional[str]:
        return self.info.get("cudnn_version")

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(self.info.get("cuda_compute_capabilities") or ())


@dataclasses.dataclass(frozen=True)
class TensorFlow(Record):
    """The installed TensorFlow: its distributions (name -> version), build info, `and-cuda` requirement
    strings and package folder."""

    distributions: Mapping[str, str]
    build: BuildInfo
    requires: tuple[str, ...]
    path: Optional[str] = None

    @property
    def version(self) -> Optional[str]:
        """The version of `tensorflow` itself, else of the first distribution."""
        return self.distributions.get("tensorflow") or next(iter(self.distributions.values()), None)


@dataclasses.dataclass(frozen=True)
class Library(Record):
    """A library the build loads: the file the loader took (None when it did not load, with its `error`), the
    version it reports, the CUDA it was built for, and the pip distribution that installed it."""

    path: Optional[str]
    error: Optional[str]
    version: Optional[str]
    cuda: Optional[str] = None
    package: Optional[str] = dataclasses.field(default=None, metadata=_OMIT)


@dataclasses.dataclass(frozen=True)
class Wheel(Record):
    """One of pip's nvidia-* distributions: its version and the folder of its shared libraries."""

    version: str
    lib: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Run(Record):
    """A `MatMul` asked of a device (`tfplace doctor --run`): where it ran, its first and next call's times."""

    device: str
    ran_on: Optional[str] = None
    first_ms: Optional[float] = dataclasses.field(default=None, metadata=_OMIT)
    next_ms: Optional[float] = dataclasses.field(default=None, metadata=_OMIT)
    error: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class View(Record):
    """TensorFlow's own view, read in a child process: the GPUs it lists, its diagnostic lines, the runs."""

    gpus: tuple[str, ...]
    log: tuple[str, ...] = ()
    run: Optional[tuple[Run, ...]] = dataclasses.field(default=None, metadata=_OMIT)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MachineFacts(Record):
    """A machine's facts (`tfplace doctor --save` writes them, `--facts` reads them). The NVIDIA GPUs on the
    PCI bus (`pci_gpus`), what failed while asking the driver (`probe_errors`), pip's `nvidia_wheels` and
    TensorFlow's view are optional keys."""

    format: str = FORMAT
    platform: Platform
    python: str
    driver: Optional[Driver]
    gpus: tuple[Gpu, ...]
    pci_gpus: tuple[str, ...] = ()
    probe_errors: tuple[str, ...] = ()
    tensorflow: Optional[TensorFlow]
    libraries: Mapping[str, Library]
    nvidia_wheels: Mapping[str, Wheel] = dataclasses.field(default_factory=_empty)
    environment: Mapping[str, Optional[str]]
    tensorflow_view: Optional[View] = None

    @classmethod
    def decode(cls, data: object, where: str, key: str) -> MachineFacts:
        if not isinstance(data, dict):
            raise FactsError(f"{where}: expected a JSON object in the {FORMAT} format, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise FactsError(f"{where}: format {data.get('format')!r} is not {FORMAT!r} "
                             "(write one with tfplace doctor --save=FILE)")
        return super().decode(data, where, key)

    @classmethod
    def load(cls, path: Union[str, os.PathLike[str]]) -> MachineFacts:
        """The facts in a file (`FactsError` naming it when it cannot be read or holds no facts)."""
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as err:
            raise FactsError(f"{where}: cannot be read ({err.__class__.__name__}: {err})") from None
        try:
            data = json.loads(text)
        except ValueError as err:
            raise FactsError(f"{where}: not JSON ({err})") from None
        return cls.from_json(data, where)

    def save(self, path: Union[str, os.PathLike[str]]) -> None:
        """Writes the facts as JSON to `path`, whole or not at all (an interrupted write leaves `path` as it was)."""
        def write(temporary: str) -> None:
            with open(temporary, "w", encoding="utf-8") as file:
                json.dump(self.to_json(), file, indent=2)
                file.write("\n")

        _files.write_whole(os.fspath(path), write)
