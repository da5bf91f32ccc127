"""Type stub of the native module (csrc/loadscope/python/module.cc). Internal: use the
loadscope package."""

from typing import Any, Dict, List, Sequence, Tuple, Union

class BlockView:
    """A span of a batch block; implements the buffer protocol (for torch.frombuffer)."""
    @property
    def nbytes(self) -> int: ...

class FieldSpec:
    name: str
    keys: List[str]

def image_field(name: str, keys: List[str], height: int, width: int, crop: str, scale: Tuple[float, float],
                ratio: Tuple[float, float], resize: int, flip: float, channels_last: bool, exif: bool,
                dct_scaling: bool, max_pixels: int, optional: bool) -> FieldSpec: ...
def plain_field(name: str, keys: List[str], kind: str, optional: bool = False) -> FieldSpec: ...
def video_field(name: str, keys: List[str], frames: int, stride: int, fps: float, position: str, clips: int,
                short: str, height: int, width: int, crop: str, scale: Tuple[float, float],
                ratio: Tuple[float, float], resize: int, flip: float, channels_last: bool, stream: int,
                decoder_threads: int, rotate: bool, color_tags: bool, optional: bool) -> FieldSpec: ...
def video_index(path: str, stream: int = -1, rotate: bool = True) -> Dict[str, Any]: ...

class Source:
    @property
    def size(self) -> int: ...

class ListSource(Source):
    def __init__(self, samples: List[Tuple[str, List[Tuple[str, bool, Union[str, bytes]]]]]) -> None: ...

class TarSource(Source):
    def __init__(self, shards: List[str], shuffle_buffer: int) -> None: ...
    @property
    def bytes_read(self) -> int: ...

class Batch:
    index: int
    size: int
    keys: List[str]
    positions: List[int]
    @property
    def skipped(self) -> List[Dict[str, Any]]: ...
    @property
    def warnings(self) -> List[Dict[str, Any]]: ...
    def fixed(self, slot: int) -> BlockView: ...
    def strings(self, slot: int, as_bytes: bool) -> List[Any]: ...

class EpochRun:
    def next(self, timeout_ms: int) -> Union[Batch, str, None]:
        """A batch, "timeout", or None at the end of the epoch."""
    def stop(self) -> None: ...
    def stats(self) -> Dict[str, Any]: ...

class Pipeline:
    def __init__(self, source: Source, fields: Sequence[FieldSpec]) -> None: ...
    def slots(self, field: int) -> Tuple[List[int], List[int]]:
        """(fixed-size output indices, string output indices) of a field."""
    def start(self, threads: int, batch_size: int, prefetch: int, drop_last: bool, on_error: str,
              max_errors: int, max_error_rate: float, seed: int, epoch: int, shuffle: bool,
              batch_offset: int, batch_stride: int) -> EpochRun: ...

def decode_image(data: bytes, field: FieldSpec, seed: int = 0, epoch: int = 0, position: int = 0) -> Tuple[bytes, str]: ...
def turbojpeg_decode_only(jpegs: List[bytes], threads: int, repeat: int = 1) -> Tuple[float, int, int]: ...
def library_versions() -> Dict[str, str]:
    """Versions of FFmpeg's libraries, libjpeg-turbo, oneTBB and zlib (runtime and built)."""
