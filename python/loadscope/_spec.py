"""``Spec``: what defines a loader's batches — its source, its fields and every option of
``_options.OPTIONS`` — as one plain value, checked when it is made."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional

from ._errors import ConfigError
from ._fields import Field
from ._options import BY_NAME, KEEP, OPTIONS, REQUIRED
from ._sources import Source

FIELD_KINDS = "Image, VideoClip, Audio, Int, Text, Json, Bytes"
SOURCE_KINDS = "Folder, Files, FileList, WebDataset or Mix"


class Spec:
    """Everything that defines a loader's batches: ``source``, ``fields`` and the options (any
    keyword of ``Loader``; the defaults filled in). A plain value: immutable, comparable
    (``==``) and picklable — sources travel by their arguments and are read again where they
    land (a folder's or a list's copy checked to list the same samples) — so ``Loader(spec)`` in
    another process, or on another machine with the same data, yields the same batches byte for
    byte. Every option is checked when the spec is made; the entries ``output`` names, against
    the fields' entries, when a loader is.

    A spec holds what was declared; what depends on the process is resolved by the loader that
    runs it: ``threads=None`` (its cores), ``rank``/``world_size`` of ``None`` (torch.distributed
    or torchrun's variables), ``device`` (whether CUDA is there). ``loader.spec`` is the spec a
    loader was made from; ``spec.replace(batch_size=16)`` is another one.
    """

    __slots__ = ("source", "fields", "_options")
    __hash__ = None  # type: ignore[assignment]  # equal specs may hold unhashable fields

    def __init__(self, source: Source, *, fields: Optional[Mapping[str, Field]] = None, **options: Any) -> None:
        if fields is None:
            raise TypeError("Loader() needs fields=, a dict of name -> loadscope field")
        if not isinstance(source, Source):
            raise ConfigError(f"source must be a loadscope {SOURCE_KINDS}, got {type(source).__name__}")
        if not isinstance(fields, Mapping) or not fields:
            raise ConfigError(f"fields must be a non-empty dict of name -> loadscope field ({FIELD_KINDS})")
        for name, f in fields.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"fields: names must be non-empty strings, got {name!r}")
            if not isinstance(f, Field) or type(f) is Field:
                raise ConfigError(f"fields[{name!r}] must be one of {FIELD_KINDS}, got {type(f).__name__}")
            if name.startswith("__"):
                raise ConfigError(f"fields[{name!r}]: names starting with '__' are reserved")
        unknown = sorted(set(options) - set(BY_NAME))
        if unknown:  # a TypeError, as Python's own for an unexpected keyword
            raise TypeError(f"{', '.join(unknown)}: not a Loader option; allowed are source, fields, "
                            + ", ".join(BY_NAME))
        values: Dict[str, Any] = {}
        for o in OPTIONS:
            if o.name in options:
                values[o.name] = o.check(o, options[o.name])
            elif o.default is REQUIRED:
                raise TypeError(f"Loader() needs {o.name}= ({o.allowed})")
            else:
                values[o.name] = o.default
        # What holds between options wherever the spec runs (what depends on the process, the
        # loader resolves: _loader_args).
        if (values["rank"] is None) != (values["world_size"] is None):
            raise ConfigError("give both rank and world_size, or neither (then they come from torch.distributed "
                              "or torchrun's RANK/WORLD_SIZE)")
        if values["world_size"] is not None:
            if values["world_size"] < 1:
                raise ConfigError(f"world_size must be an int >= 1, got {values['world_size']!r}")
            if values["rank"] >= values["world_size"]:
                raise ConfigError(f"rank must be an int in [0, {values['world_size'] - 1}], got {values['rank']!r}")
        if values["cache_limit"] is not None and values["cache_dir"] is None:
            raise ConfigError("cache_limit needs a cache_dir")
        if values["memory_limit"] is not None and "auto" not in (values["threads"], values["prefetch"]):
            raise ConfigError("memory_limit bounds what threads='auto' and prefetch='auto' may grow into; "
                              "with fixed settings it has nothing to bound")
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "fields", MappingProxyType(dict(fields)))  # read-only: replace() changes it
        object.__setattr__(self, "_options", values)

    @property
    def options(self) -> Dict[str, Any]:
        """Every option's value (a copy), in the declaration's order."""
        return dict(self._options)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "_options")[name]
        except KeyError:
            raise AttributeError(f"Spec has no option {name!r}; options: {', '.join(BY_NAME)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Spec is immutable: spec.replace({name}=...) makes another")

    def replace(self, **changes: Any) -> "Spec":
        """This spec with some of its parts (``source``, ``fields``) or options changed."""
        source = changes.pop("source", self.source)
        fields = changes.pop("fields", self.fields)
        return Spec(source, fields=fields, **{**self._options, **changes})

    def one_sample(self) -> "Spec":
        """The spec of ``loader.dataset[i]``: one sample a batch, in the source's order, with this
        spec's draws (each option's ``one_sample`` in the declaration)."""
        return self.replace(**{o.name: o.one_sample for o in OPTIONS if o.one_sample is not KEEP})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spec):
            return NotImplemented
        return (self.source == other.source and self.fields == other.fields
                and self._options == other._options)

    def __reduce__(self):  # rebuilt through __init__: checked again where it lands
        return (_rebuild, (self.source, dict(self.fields), self._options))

    def describe(self) -> str:
        """The arguments that make this spec: the source, the fields, the options not at their
        default."""
        given = [f"{k}={v!r}" for k, v in self._options.items() if not _same(v, BY_NAME[k].default)]
        fields = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.fields.items()) + "}"
        return ", ".join([repr(self.source), f"fields={fields}"] + given)

    def __repr__(self) -> str:
        return f"Spec({self.describe()})"


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # False is not 0 (error_budget), 1 is not True


def _rebuild(source: Source, fields: Dict[str, Field], options: Dict[str, Any]) -> Spec:
    return Spec(source, fields=fields, **options)
