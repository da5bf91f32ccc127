"""loadscope: a native data loader for PyTorch training on images and video, with telemetry.

    import loadscope as ls
    loader = ls.Loader(ls.Folder("train/"), fields={"jpg": ls.Image(224, flip=0.5), "cls": ls.Int()},
                       batch_size=256, shuffle=True)
    for batch in loader:
        images, labels = batch["jpg"], batch["cls"]
"""

import torch  # noqa: F401  (loaded before the native module; tensors are made with torch)

from ._errors import (
    BatchTimeout,
    ConfigError,
    DecodeError,
    ErrorBudgetExceeded,
    FieldError,
    LoadscopeError,
    ReadError,
    SampleError,
)
from ._augment import ColorJitter, Op, RandAugment, RandomErasing, augmentations
from ._fields import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Audio,
    Bytes,
    Field,
    Image,
    Int,
    Json,
    Text,
    VideoClip,
    formats,
    normalize,
)
from ._loader import Dataset, Loader
from ._options import default_threads
from ._spec import Spec
from ._remote import Remote
from . import ray
from .mix import mixup_cutmix
from .swap import from_dataloader
from ._sources import (
    IMAGE_EXTENSIONS,
    VIDEO_EXTENSIONS,
    FileList,
    Files,
    Folder,
    Mix,
    Source,
    WebDataset,
    expand_braces,
)

from ._version import __version__ as __version__  # re-exported

__all__ = [
    "Audio", "BatchTimeout", "Bytes", "ColorJitter", "Op", "augmentations", "ConfigError", "IMAGENET_MEAN", "IMAGENET_STD", "RandAugment", "RandomErasing", "normalize", "Dataset", "DecodeError", "ErrorBudgetExceeded", "Field", "FieldError",
    "FileList", "Files", "Folder", "IMAGE_EXTENSIONS", "Image", "Int", "Json", "Loader", "LoadscopeError", "Mix",
    "ReadError", "Remote", "SampleError", "ray", "Source", "Spec", "Text", "VIDEO_EXTENSIONS", "VideoClip", "WebDataset",
    "default_threads", "expand_braces", "formats", "from_dataloader", "mixup_cutmix",
]
