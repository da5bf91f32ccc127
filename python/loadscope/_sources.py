"""Where samples come from: a folder, a manifest (file list) or WebDataset-style tar shards.

A sample is a key plus named members. Members are named by lower-case file extension
("jpg", "cls", "txt", ...), which is what ``fields=`` refers to.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from ._errors import ConfigError
from ._fields import VIDEO_MEMBERS
from ._options import ON_ERROR
from ._remote import Remote, plain_name, with_cache

# torchvision's IMG_EXTENSIONS, a compatibility contract rather than a list of what decodes:
# which files make a sample in a Folder, so that a Folder has ImageFolder's samples, order and
# class indices (all of them decode; tested against torchvision's own list). GIFs decode but
# are not listed, as in ImageFolder: pass extensions=IMAGE_EXTENSIONS + (".gif",) for them.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# Every video container's extension in the format table (decode/formats.h).
VIDEO_EXTENSIONS = tuple("." + e for e in VIDEO_MEMBERS)

PathLike = Union[str, "os.PathLike[str]"]

# (name, is_path, path-or-value); paths as bytes (os.fsencode) so any file name survives.
_Member = Tuple[str, bool, Union[str, bytes]]


def is_url(name: str) -> bool:
    """True for names read over the network: a remote storage's scheme (io/storage.h: ``s3://``,
    ``http://``, ``https://``)."""
    from . import _native
    return isinstance(name, str) and _native.is_remote(name)


def check_url(url: str, who: str) -> str:
    """Refuses what cannot be read safely: schemes without a storage, and credentials written into
    the URL (they would end up in errors, logs and traces; use the environment: docs/remote.md)."""
    from . import _native
    scheme = url.split("://")[0] if "://" in url else ""
    if scheme and _native.storage_scheme(url) not in _native.storage_schemes():
        allowed = ", ".join(s + "://" for s in _native.storage_schemes())
        raise ConfigError(f"{who}: {scheme}:// is not supported; allowed are {allowed} and local paths")
    if not is_url(url):
        return url
    host = url.split("://", 1)[1].split("/", 1)[0]
    if "?" in url or "#" in url:
        raise ConfigError(f"{who}: {_native_redact(url)}: URLs with a query string (presigned URLs) are not supported: "
                          "name objects s3://bucket/key and give credentials in the environment (docs/remote.md)")
    if "@" in host:
        raise ConfigError(f"{who}: {_native_redact(url)}: credentials in a URL are refused (they would appear in "
                          "errors and logs); set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a profile instead")
    return url


def _remote_name(remote: Optional[Remote], name: str, who: str) -> str:
    """A name as the source passes it on: read with `remote`'s settings (``Remote.name``)."""
    if remote is None:
        return name
    if not isinstance(remote, Remote):
        raise ConfigError(f"{who}(remote=): a loadscope.Remote(...), got {remote!r}")
    return remote.name(name)


def _native_redact(url: str) -> str:
    from . import _native
    return _native.redact_url(url)


def _remote_setup(names: Sequence[str]) -> None:
    """Lets the native client see the environment as it is now (it is read from this thread,
    never from the loader's threads: getenv races with os.environ assignments)."""
    if any(is_url(n) for n in names):
        from . import _native
        _native.remote_reload_environment()


def _exists(path: str, absent_if_denied: bool = False) -> bool:
    """A local file, or a remote object that answers HEAD (absent: 404 of the key, or with
    absent_if_denied a 403 AccessDenied). Any other failure — wrong credentials, a missing
    bucket, no server — is a ConfigError naming it."""
    if not is_url(path):
        return os.path.isfile(path)
    from . import _native
    from ._errors import ReadError
    try:
        return _native.remote_probe(path, absent_if_denied) is not None
    except ReadError as e:  # "HEAD <url>: HTTP 403 SignatureDoesNotMatch ... (credentials: ...)"
        raise ConfigError(e.reason) from None


class Source:
    """Base class of sources. ``len(source)`` is the number of samples when known."""

    def _native(self, native, need_size: bool = False):  # pragma: no cover - overridden
        """The native source. need_size: the loader must know the epoch's size before
        reading it (several ranks)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} does not know its length before reading")

    def _cached(self, cache_dir: str, cache_limit: int) -> "Source":
        """This source with its remote objects read through the node-local cache ``cache_dir``
        (a loader's ``cache_dir=``: io/cache.h's CachedStorage, under the names' own scheme),
        unless its ``remote`` keeps them in a cache of its own. The default: no remote objects."""
        return self

    # Sources are values: equal when they would list the same samples the same way (what a
    # pickled copy carries), so that specs compare.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Source):
            return NotImplemented
        return type(self) is type(other) and self._state() == other._state()

    def _state(self) -> Any:
        """What a pickled copy carries."""
        return dict(self.__dict__)

    def __hash__(self) -> int:  # equal sources have equal reprs
        return hash((type(self), repr(self)))


def _manifest_cache_dir() -> str:
    """Where FileList keeps parsed manifests: $LOADSCOPE_MANIFEST_CACHE, else
    $XDG_CACHE_HOME/loadscope/manifests (~/.cache/loadscope/manifests)."""
    d = os.environ.get("LOADSCOPE_MANIFEST_CACHE")
    if d is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "loadscope", "manifests")
    return d


class _Rows:
    """The samples of a table as (key, members) pairs, made on demand (``shards.convert``)."""

    def __init__(self, table) -> None:
        self._table = table

    def __len__(self) -> int:
        return self._table.rows

    def __iter__(self) -> Iterator[Tuple[bytes, List[_Member]]]:
        for i in range(self._table.rows):
            yield self._table.sample(i)


class _TableSource(Source):
    """A source whose samples are a native SampleTable (io/table.h): one set of columns, not a
    Python object per sample. Pickled by its arguments; the table is rebuilt where it lands."""

    _table: Any = None

    def __len__(self) -> int:
        if self._table is None:
            raise TypeError(f"{type(self).__name__} was not read")
        return int(self._table.rows)

    @property
    def bytes_per_sample(self) -> float:
        """Memory the sample list holds per sample (paths, columns, offsets)."""
        return self._table.nbytes / max(1, self._table.rows)

    @property
    def _samples(self) -> _Rows:
        return _Rows(self._table)

    def _native(self, native, need_size: bool = False):
        return native.TableSource(self._table)

    def _load(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_table", None)
        state["_pickled"] = self._identity()
        return state

    def __setstate__(self, state) -> None:
        pickled = state.pop("_pickled")
        self.__dict__.update(state)
        self._load()
        if self._identity() != pickled:  # workers and ranks must read the same list in the same order
            raise ConfigError(f"{self!r} changed between pickling and unpickling (a copy of a loader in another "
                              "process would read other samples); keep the data fixed while training")

    def _state(self) -> Any:
        return self.__getstate__()

    def _identity(self):
        """What says that two copies list the same samples."""
        return (self._table.rows, self._table.digest())


class Folder(_TableSource):
    """Image files under a directory, sample for sample like ``torchvision.datasets.ImageFolder``.

    Every file whose name ends in one of ``extensions`` is a sample, in ImageFolder's order
    (classes, then ``os.walk`` with sorted directories and file names). With
    ``labels="subfolders"`` each immediate subdirectory is a class, indexed by sorted name
    exactly as ImageFolder does (hidden directories included, as there), and every sample gets
    the integer member ``"cls"``; with ``"none"`` the tree is flat. ``"auto"``: subfolders when
    the root has subdirectories and no image files of its own.

    Other files that share an image's name up to the last dot are attached to it as members:
    ``a.jpg`` + ``a.txt`` + ``a.json`` give a sample with members ``jpg``, ``txt``, ``json``.
    The sample's key is the image's path. The tree is scanned in C++ (io/folder.h) and held as
    columns: a million files take about a second and some 20 bytes each plus their names.
    """

    def __init__(
        self,
        root: PathLike,
        *,
        labels: str = "auto",
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
    ) -> None:
        self.root = os.fspath(root)  # labels and the directory are checked by the scan (io/folder.cc)
        self._exts = [e.lower() if e.startswith(".") else "." + e.lower() for e in extensions]
        self._labels_arg = labels
        self._load()

    def _load(self) -> None:
        from . import _native
        r = _native.scan_folder(os.fsencode(self.root), [os.fsencode(e) for e in self._exts], self._labels_arg)
        self._table = r["table"]
        self.labels: str = r["labels"]
        self.classes: List[str] = r["classes"]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.ignored_files: int = r["ignored_files"]

    def __repr__(self) -> str:
        return f"Folder({self.root!r}, samples={self._table.rows if self._table else '?'}, classes={len(self.classes)})"


class Files(_TableSource):
    """Files named one by one, each with an integer label: ``[(path, label), ...]`` in that order,
    as torchvision's ``ImageFolder.samples`` (any ``DatasetFolder``'s) holds them — cut,
    filtered, reordered or relabelled as the list may be. The file becomes the member named by
    its extension and the label the int member ``label`` (``"cls"``, as a ``Folder`` names it);
    a sample's key is its path as given. ``labels=False``: a list of paths, no labels.

    What ``from_dataloader`` reads when a dataset's list is not exactly its folder's
    (``ls.Folder``, which scans instead of holding the list, stands for it when it is). The list
    is held as columns (io/table.h) plus its paths once more for pickling: a copy of the loader
    in another process gets the same list, not a new scan."""

    def __init__(self, samples: Sequence[Any], *, label: str = "cls", labels: bool = True) -> None:
        from array import array

        if not isinstance(label, str) or not label or label.startswith("__"):
            raise ConfigError(f"Files(label={label!r}): a member name (a non-empty str, not starting with '__')")
        paths: List[bytes] = []
        ints = array("q")
        for i, item in enumerate(samples):
            if labels:
                ok = isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], (str, bytes, os.PathLike))
                ok = ok and isinstance(item[1], int) and not isinstance(item[1], bool)
                if not ok:
                    raise ConfigError(f"Files: sample {i} is {item!r}; each is a (path, int label) pair "
                                      "(labels=False: a path)")
                path, value = item
                ints.append(value)
            else:
                if not isinstance(item, (str, bytes, os.PathLike)):
                    raise ConfigError(f"Files(labels=False): sample {i} is {item!r}, not a path")
                path = item
            b = os.fsencode(path)
            if not b or b"\0" in b:
                raise ConfigError(f"Files: sample {i}'s path {path!r} is empty or holds a NUL byte")
            paths.append(b)
        if not paths:
            raise ConfigError("Files: the list is empty")
        self.label = label
        self._paths = b"\0".join(paths)
        self._labels = ints.tobytes()
        self._load()

    def _load(self) -> None:
        from array import array

        from . import _native
        labels = array("q")
        labels.frombytes(self._labels)
        self._table = _native.table_of_files(self._paths, labels, self.label)

    def __repr__(self) -> str:
        return f"Files({self._table.rows if self._table else '?'} files)"


class FileList(_TableSource):
    """Samples listed in a manifest: JSON lines (``.jsonl``, ``.ndjson``) or CSV (``.csv``)
    with a header.

    Each record names a file in ``path_key`` (relative paths are taken from ``root``, by default
    the manifest's directory); the file becomes the member named by its extension. Every other
    column becomes a member too: ``{"path": "a.jpg", "cls": 3, "txt": "a dog"}`` gives members
    ``jpg``, ``cls`` and ``txt`` (a JSON value that is not a string as written in the file, so
    ``"3"``). Files are not touched until loading: a missing one is a ``ReadError`` for that
    sample.

    The manifest is parsed in C++ (in parallel for JSON lines) into columns — about 16 bytes per
    row plus the paths for ``{"path", "cls"}`` — and the result is kept in ``cache_dir`` (default
    ``$LOADSCOPE_MANIFEST_CACHE``, else ``~/.cache/loadscope/manifests``; ``None``: no cache),
    keyed by the manifest's size, modification time and a checksum of its ends, so the next
    start maps it instead of parsing (docs/sources.md).

    A bad row (not JSON, no ``path_key``, a path without extension, a CSV row with the wrong
    number of fields, bytes that are not UTF-8, over 16 MiB) raises a ``ConfigError`` naming the
    manifest and line; with ``on_error="skip"`` it is left out, counted in ``skipped_rows`` and
    reported by a warning that names the first ones (``skip_notes``).

    ``remote``: a ``loadscope.Remote(...)`` whose endpoint, credentials and retries read the
    manifest, ``root`` and the rows that are URLs, instead of the process's (docs/remote.md).
    """

    ON_ERROR = ON_ERROR  # the Loader's (a bad row is a bad sample)

    def __init__(self, manifest: PathLike, *, root: Optional[PathLike] = None, path_key: str = "path",
                 on_error: str = "raise", cache_dir: Optional[PathLike] = "", remote: Optional[Remote] = None) -> None:
        manifest = _remote_name(remote, check_url(os.fspath(manifest), "FileList"), "FileList")
        self.remote = remote
        if on_error not in self.ON_ERROR:
            raise ConfigError(f"FileList(on_error={on_error!r}): allowed are {', '.join(map(repr, self.ON_ERROR))}")
        if not isinstance(path_key, str) or not path_key:
            raise ConfigError(f"FileList(path_key={path_key!r}): must be a non-empty str")
        _remote_setup([manifest, os.fspath(root) if root is not None else ""])
        if not _exists(manifest):
            raise ConfigError(f"FileList: manifest {_native_redact(manifest) if is_url(manifest) else manifest!r} "
                              "does not exist")
        self.manifest = manifest
        if root is not None:
            self.root = _remote_name(remote, check_url(os.fspath(root), "FileList(root=)"), "FileList")
        elif is_url(manifest):
            self.root = manifest.rsplit("/", 1)[0]
        else:
            self.root = os.path.dirname(os.path.abspath(manifest))
        self.path_key = path_key
        self.on_error = on_error
        self.cache_dir = None if cache_dir is None else (os.fspath(cache_dir) or _manifest_cache_dir())
        self._load()

    def _cached(self, cache_dir: str, cache_limit: int) -> Source:
        remote = with_cache(self.remote, cache_dir, cache_limit)
        if remote is None:  # its rows may name objects whatever the manifest is: read again
            return self
        return FileList(plain_name(self.manifest), root=plain_name(self.root), path_key=self.path_key,
                        on_error=self.on_error, cache_dir=self.cache_dir, remote=remote)

    def _load(self) -> None:
        from . import _native
        cache = ""
        if self.cache_dir is not None:
            try:
                os.makedirs(self.cache_dir, exist_ok=True)
                cache = self.cache_dir
            except OSError as e:
                warnings.warn(f"FileList: no manifest cache ({e}); every start parses {self.manifest}", stacklevel=3)
        name = self.manifest if is_url(self.manifest) else os.path.abspath(self.manifest)
        r = _native.read_manifest(os.fsencode(name), os.fsencode(self.root), self.path_key,
                                  self.on_error == "skip", os.fsencode(cache),
                                  "+" + self.remote.tag if self.remote is not None else "")
        self._table = r["table"]
        self.skipped_rows: int = r["skipped"]
        self.skip_notes: List[str] = r["notes"]
        self.cache_path: Optional[str] = r["cache_path"] or None
        self.from_cache: bool = r["from_cache"]
        self.cache_pending: bool = r["cache_pending"]  # a large table's file is being written in the background
        self._source: bytes = r["source"]
        if r["cache_error"]:
            warnings.warn(f"FileList: could not write the manifest cache: {r['cache_error']}", stacklevel=3)
        if self.skipped_rows:
            more = f" (and {self.skipped_rows - len(self.skip_notes)} more)" if self.skipped_rows > len(self.skip_notes) else ""
            warnings.warn(f"FileList: skipped {self.skipped_rows} bad row(s) of {self.manifest}: "
                          + "; ".join(self.skip_notes) + more, stacklevel=3)

    def _identity(self):
        # The manifest's size, version and CRC of its ends, and the rows it gave (no pass over
        # 10^7 paths to compare two copies).
        return (self._table.rows, self._source)

    def __repr__(self) -> str:
        return f"FileList({self.manifest!r}, samples={self._table.rows if self._table else '?'})"


_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> List[str]:
    """Expands ``{000..127}`` ranges (zero padding kept) and ``{a,b}`` lists, like the shell
    and WebDataset: ``"s-{00..02}.tar"`` -> ``["s-00.tar", "s-01.tar", "s-02.tar"]``."""
    m = _BRACE.search(pattern)
    if m is None:
        return [pattern]
    body = m.group(1)
    head, tail = pattern[: m.start()], pattern[m.end() :]
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng:
        lo, hi = rng.group(1), rng.group(2)
        padded = any(x.startswith("0") and len(x) > 1 for x in (lo, hi))
        width = max(len(lo), len(hi)) if padded else 0
        step = 1 if int(hi) >= int(lo) else -1
        options = [str(i).zfill(width) for i in range(int(lo), int(hi) + step, step)]
    elif "," in body:
        options = body.split(",")
    else:
        raise ConfigError(f"cannot expand {{{body}}} in {pattern!r}: use {{lo..hi}} or {{a,b,...}}")
    return [p for o in options for p in expand_braces(head + o + tail)]


class WebDataset(Source):
    """WebDataset-style tar shards (``.tar`` or ``.tar.gz``): members that share a key (the
    name up to the first dot) and follow each other form a sample.

    Args:
        urls: a pattern with braces (``"train-{000000..000127}.tar"``), or a list of paths.
        shuffle_buffer: with ``shuffle=True`` the loader permutes the shard order per epoch and
            passes samples through a buffer of this many samples (held in memory).
        index: ``"auto"``: read ``<shard>.idx`` (written by ``loadscope index``) where present,
            and index the others in memory by reading their headers when the size is needed
            (several ranks) or some shards have one; otherwise stream the shards. ``"scan"``:
            index every shard without an ``.idx`` in memory now. ``"off"``: always stream (one
            rank only). With an index the loader knows the size up front, skips without
            reading (resume, other ranks' batches) and reads members in parallel; the samples
            and their order are the same either way (docs/distributed.md).
        remote: a ``loadscope.Remote(...)`` whose endpoint, credentials and retries read the
            shards and their indexes, instead of the process's (docs/remote.md).
    """

    INDEX = ("auto", "scan", "off")

    def __init__(self, urls: Union[str, Sequence[str]], *, shuffle_buffer: int = 1000, index: str = "auto",
                 remote: Optional[Remote] = None) -> None:
        patterns = [urls] if isinstance(urls, (str, os.PathLike)) else list(urls)
        shards: List[str] = []
        for p in patterns:
            shards.extend(expand_braces(os.fspath(p)))
        if not shards:
            raise ConfigError("WebDataset: no shards given")
        shards = [_remote_name(remote, check_url(s, "WebDataset"), "WebDataset") for s in shards]
        self.remote = remote
        _remote_setup(shards)
        # Local shards are all checked; of remote ones the first only (a HEAD each would cost
        # seconds for 10^4 shards): it catches wrong credentials, a missing bucket or a typo in
        # the pattern before any thread starts. A later missing shard is a ReadError naming it.
        objects = [s for s in shards if is_url(s)]
        missing = [s for s in shards if not is_url(s) and not os.path.isfile(s)]
        if objects and not _exists(objects[0]):
            missing.insert(0, _native_redact(objects[0]))
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ConfigError(f"WebDataset: shard(s) not found: {', '.join(missing[:3])}{more}")
        if not isinstance(shuffle_buffer, int) or shuffle_buffer < 1:
            raise ConfigError(f"WebDataset(shuffle_buffer={shuffle_buffer!r}): must be an int >= 1")
        if index not in self.INDEX:
            raise ConfigError(f"WebDataset(index={index!r}): allowed are {', '.join(map(repr, self.INDEX))}")
        self.shards = shards
        self.shuffle_buffer = shuffle_buffer
        self.index = index

    def index_paths(self) -> List[str]:
        return [s + ".idx" for s in self.shards]

    def _cached(self, cache_dir: str, cache_limit: int) -> Source:
        remote = with_cache(self.remote, cache_dir, cache_limit)
        if remote is None or not any(is_url(s) for s in self.shards):
            return self
        return WebDataset([plain_name(s) for s in self.shards], shuffle_buffer=self.shuffle_buffer,
                          index=self.index, remote=remote)

    def _have_indexes(self) -> List[bool]:
        """Which shards have an ``.idx``. Remote shards are taken to be indexed alike, as
        ``loadscope index`` leaves them: the first one's index is asked for, not every one's."""
        remote_has = None
        out = []
        for p in self.index_paths():
            if is_url(p):
                if remote_has is None:  # the shard itself was readable: a denied .idx is a missing one
                    remote_has = _exists(p, absent_if_denied=True)
                out.append(remote_has)
            else:
                out.append(os.path.isfile(p))
        return out

    def _native(self, native, need_size: bool = False):
        have = [False] * len(self.shards) if self.index == "off" else self._have_indexes()
        indexed = self.index == "scan" or (self.index == "auto" and (need_size or any(have)))
        if not indexed:
            if need_size:
                raise ConfigError("WebDataset(index='off') streams its shards, so its size is unknown before "
                                  "reading, and several ranks need it: use index='auto' (`loadscope index`)")
            return native.TarSource([os.fsencode(s) for s in self.shards], self.shuffle_buffer)
        gz = [s for s, h in zip(self.shards, have) if not h and s.endswith((".gz", ".tgz"))]
        if gz:
            raise ConfigError(f"WebDataset: {gz[0]} is gzip-compressed, so it cannot be indexed (offsets would need "
                              "the whole stream decompressed), and several ranks need the size before reading; "
                              "convert to uncompressed shards: `loadscope convert`")
        def one(job):
            s, p, h = job
            return native.read_index(p, s) if h else native.index_shard(s)

        jobs = list(zip(self.shards, self.index_paths(), have))
        if any(is_url(s) for s in self.shards):
            # A few round trips per shard (the index, the size, two fingerprint ranges): in
            # parallel, or 10^4 shards at 20 ms each would take minutes before the first batch.
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
                indexes = list(pool.map(one, jobs))
        else:
            indexes = [one(j) for j in jobs]
        return native.IndexedTarSource(indexes, self.shuffle_buffer)

    def __repr__(self) -> str:
        return f"WebDataset({len(self.shards)} shards)"


class Mix(Source):
    """Several sources mixed by sampling weights, e.g. a folder of JPEGs and shards of MP4s:

        ls.Mix({"images": ls.Folder("photos/"), "clips": ls.WebDataset("clips-{0..9}.tar")},
               weights={"images": 0.7, "clips": 0.3})

    Each sample of an epoch comes from a source with probability proportional to its weight,
    drawn from ``(seed, epoch)``; a source that runs out starts over with a new order of its own,
    so it repeats only after showing all its samples. An epoch is ``samples_per_epoch`` samples
    (default: the sum of the sources' sizes, when all are known). Declare fields that only
    some sources have with ``optional=True``.
    """

    def __init__(self, sources, *, weights=None, samples_per_epoch: Optional[int] = None) -> None:
        if isinstance(sources, dict):
            names, srcs = list(sources), list(sources.values())
        else:
            srcs = list(sources)
            names = [str(i) for i in range(len(srcs))]
        if not srcs or not all(isinstance(s, Source) for s in srcs):
            raise ConfigError("Mix: give a non-empty list or dict of loadscope sources")
        if weights is None:
            w = [1.0] * len(srcs)
        elif isinstance(weights, dict):
            if set(weights) != set(names):
                raise ConfigError(f"Mix: weights must name exactly the sources {names}, got {sorted(weights)}")
            w = [weights[n] for n in names]
        else:
            w = list(weights)
        if len(w) != len(srcs) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in w) or sum(w) <= 0:
            raise ConfigError(f"Mix: weights must be {len(srcs)} numbers >= 0 with a positive sum, got {weights!r}")
        if samples_per_epoch is None:
            try:
                samples_per_epoch = sum(len(s) for s in srcs)
            except TypeError:
                raise ConfigError("Mix: a source does not know its length (tar shards): give samples_per_epoch") from None
        if isinstance(samples_per_epoch, bool) or not isinstance(samples_per_epoch, int) or samples_per_epoch < 1:
            raise ConfigError(f"Mix: samples_per_epoch must be an int >= 1, got {samples_per_epoch!r}")
        self.names, self.sources, self.weights = names, srcs, [float(x) for x in w]
        self.samples_per_epoch = samples_per_epoch

    def __len__(self) -> int:
        return self.samples_per_epoch

    def _cached(self, cache_dir: str, cache_limit: int) -> Source:
        sources = [s._cached(cache_dir, cache_limit) for s in self.sources]
        if all(a is b for a, b in zip(sources, self.sources)):
            return self
        return Mix(dict(zip(self.names, sources)), weights=dict(zip(self.names, self.weights)),
                   samples_per_epoch=self.samples_per_epoch)
    def _native(self, native, need_size: bool = False):  # its size is samples_per_epoch
        return native.MixSource([s._native(native) for s in self.sources], self.weights, self.samples_per_epoch)

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={s!r} x{w:g}" for n, s, w in zip(self.names, self.sources, self.weights))
        return f"Mix({parts}, samples_per_epoch={self.samples_per_epoch})"
