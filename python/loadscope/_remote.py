"""``Remote``: settings for reading object storage that a source carries instead of taking the
process's (the environment's AWS_* and LOADSCOPE_REMOTE_*: docs/remote.md)."""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field, fields
from typing import Optional, Union

from . import _native
from ._errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]

# Schemes whose storage takes these settings (io/storage.cc's RemoteStorage).
_SCHEMES = ("s3", "http", "https")


@dataclass(frozen=True)
class Remote:
    """Where and how a source's ``s3://`` and ``http(s)://`` names are read, for that source
    only: two sources with different settings work side by side in one process, and so do the
    loaders made from them. What is not given is the process's setting (the environment's).

    Args:
        endpoint: an S3-compatible server (``"http://host:7480"``), addressed path-style.
        region: the region requests are signed for.
        profile: a section of the shared credentials file (``~/.aws/credentials``, or
            ``credentials_file``); the keys are read now, and never shown (errors name the
            profile and the key's last characters).
        credentials_file: that file.
        anonymous: unsigned requests (a public bucket), whatever the environment holds.
        attempts, stall_seconds, connect_timeout: retries, and how long a request may receive
            nothing, or take to connect, before it counts as failed.
        ca_bundle: the certificates that verify https:// servers.
        cache_dir, cache_limit: a node-local cache of this source's objects, instead of the
            loader's (``Loader(cache_dir=, cache_limit=)``) or the process's
            (``LOADSCOPE_CACHE_DIR``).

    ``WebDataset(urls, remote=...)`` and ``FileList(manifest, remote=...)`` read their shards,
    manifest and the URLs in its rows with these settings, in every thread of the loader, the
    node-local cache's fetches and the indexes included: the names carry them (as
    ``s3+r<hash>://``, which messages show as the ``s3://`` name you gave).
    """

    endpoint: Optional[str] = None
    region: Optional[str] = None
    profile: Optional[str] = None
    credentials_file: Optional[PathLike] = None
    anonymous: bool = False
    attempts: Optional[int] = None
    stall_seconds: Optional[float] = None
    connect_timeout: Optional[float] = None
    ca_bundle: Optional[PathLike] = None
    cache_dir: Optional[PathLike] = None
    cache_limit: Union[int, str, None] = None
    _tag: str = field(init=False, repr=False, compare=False, default="")
    _credentials: str = field(init=False, repr=False, compare=False, default="")
    _cache_bytes: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        for name in ("endpoint", "region", "profile"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"Remote.{name} must be a non-empty str, got {value!r}")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"Remote.endpoint={self.endpoint!r}: an http:// or https:// URL")
        for name in ("credentials_file", "ca_bundle"):
            value = getattr(self, name)
            if value is not None:
                path = os.fspath(value)
                if not os.path.isfile(path):
                    raise ConfigError(f"Remote.{name}={path!r}: no such file")
                object.__setattr__(self, name, path)
        if not isinstance(self.anonymous, bool):
            raise ConfigError(f"Remote.anonymous must be True or False, got {self.anonymous!r}")
        if self.anonymous and (self.profile or self.credentials_file):
            raise ConfigError("Remote: anonymous=True signs nothing; give no profile or credentials_file with it")
        if self.attempts is not None and (isinstance(self.attempts, bool) or not isinstance(self.attempts, int)
                                          or not 1 <= self.attempts <= 100):
            raise ConfigError(f"Remote.attempts must be an int in [1, 100], got {self.attempts!r}")
        for name in ("stall_seconds", "connect_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ConfigError(f"Remote.{name} must be a number of seconds > 0, got {value!r}")
        if self.cache_dir is not None:
            from ._loader_args import node_cache
            resolved = node_cache(self.cache_dir, self.cache_limit)
            assert resolved is not None
            object.__setattr__(self, "cache_dir", resolved[0])
            object.__setattr__(self, "_cache_bytes", resolved[1])
        elif self.cache_limit is not None:
            raise ConfigError("Remote.cache_limit needs a cache_dir")
        # A hash of the settings: the same settings, the same storage, in any process.
        given = tuple(getattr(self, f.name) for f in fields(self) if f.init)
        object.__setattr__(self, "_tag", "r" + hashlib.sha1(repr(given).encode()).hexdigest()[:10])
        # Registered now (and again wherever a pickled copy lands): the storages s3+<tag>://, ...
        source = _native.remote_profile(
            self.tag, self.endpoint or "", self.region or "", self.profile or "", os.fspath(self.credentials_file or ""),
            self.anonymous, self.attempts or -1, float(self.stall_seconds or -1), float(self.connect_timeout or -1),
            os.fspath(self.ca_bundle or ""), os.fspath(self.cache_dir or ""), self._cache_bytes)
        object.__setattr__(self, "_credentials", source)

    @property
    def tag(self) -> str:
        """A hash of the settings: the same settings, the same storage, in any process."""
        return self._tag

    @property
    def credentials(self) -> str:
        """Where the credentials come from (no secret)."""
        return self._credentials

    def name(self, url: str) -> str:
        """``url`` as the sources pass it on: ``s3://b/k`` -> ``s3+r<tag>://b/k``; a local path as
        it is."""
        scheme, sep, rest = url.partition("://")
        return f"{scheme}+{self.tag}://{rest}" if sep and scheme in _SCHEMES else url

    def __reduce__(self):  # unpickled through __init__, so that the storage is registered there
        return (Remote, tuple(getattr(self, f.name) for f in fields(self) if f.init))


def plain_name(name: str) -> str:
    """``s3+r<tag>://b/k`` -> ``s3://b/k``: the name as given, before any Remote's tag."""
    scheme, sep, rest = name.partition("://")
    return f"{scheme.split('+', 1)[0]}://{rest}" if sep and "+" in scheme else name


def with_cache(remote: Optional[Remote], cache_dir: str, cache_limit: int) -> Optional[Remote]:
    """``remote``'s settings (None: the process's) with a node-local cache of its own, for a
    loader's ``cache_dir``; None when ``remote`` has a cache already (a source's own wins)."""
    if remote is not None and remote.cache_dir is not None:
        return None
    given = {f.name: getattr(remote, f.name) for f in fields(Remote) if f.init} if remote else {}
    given.update(cache_dir=cache_dir, cache_limit=cache_limit or None)
    return Remote(**given)
