"""ImageFolder: torchvision's ImageFolder semantics over a dataset served
by dlcached, built from the dataset's listing (no filesystem walk)."""

import io
import posixpath
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._listing import Lister, list_dataset, normalize_prefix
from ..torch_data import CacheDataset

__all__ = ["ImageFolder", "IMG_EXTENSIONS", "pil_loader", "find_classes",
           "make_dataset"]

# torchvision's image extensions (datasets/folder.py), matched lower-case.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                  ".tiff", ".webp")


def pil_loader(data: Any) -> Any:
    """The image in `data` (bytes-like) as an RGB PIL image, as
    torchvision's default loader opens a file."""
    from PIL import Image
    img = Image.open(io.BytesIO(data))
    return img.convert("RGB")


def find_classes(names: Sequence[str], prefix: str = ""
                 ) -> Tuple[List[str], Dict[str, int]]:
    """The class folders under `prefix` among dataset-relative file names:
    every first path component below prefix that is a folder, sorted (as
    torchvision sorts the class directories), and their indices."""
    prefix = normalize_prefix(prefix)
    head = prefix + "/" if prefix else ""
    classes = set()
    for name in names:
        if not name.startswith(head):
            continue
        rest = name[len(head):]
        if "/" in rest:
            classes.add(rest.split("/", 1)[0])
    if not classes:
        raise FileNotFoundError("Couldn't find any class folder under %r" %
                                (prefix or "/"))
    ordered = sorted(classes)
    return ordered, {c: i for i, c in enumerate(ordered)}


def make_dataset(names: Sequence[str], class_to_idx: Dict[str, int],
                 prefix: str = "",
                 extensions: Optional[Tuple[str, ...]] = IMG_EXTENSIONS,
                 is_valid_file: Optional[Callable[[str], bool]] = None
                 ) -> List[Tuple[str, int]]:
    """(key, class index) of every valid file of every class, in
    torchvision's order: classes sorted, then within a class the folders
    in sorted order (as sorted(os.walk)), each folder's files sorted.
    A file is valid when its name ends with one of `extensions`
    (lower-cased) or is_valid_file(key) says so (exactly one of them)."""
    if (extensions is None) == (is_valid_file is None):
        raise ValueError("Both extensions and is_valid_file cannot be None "
                         "or not None at the same time")
    if is_valid_file is None:
        exts = tuple(e.lower() for e in extensions)

        def is_valid_file(key: str) -> bool:
            return key.lower().endswith(exts)

    prefix = normalize_prefix(prefix)
    head = prefix + "/" if prefix else ""
    per_class: Dict[str, List[Tuple[str, str]]] = {c: [] for c in
                                                   class_to_idx}
    for name in names:
        if not name.startswith(head):
            continue
        rest = name[len(head):]
        if "/" not in rest:
            continue
        cls = rest.split("/", 1)[0]
        if cls in per_class and is_valid_file(name):
            folder, base = posixpath.split(name)
            per_class[cls].append((folder, base))
    out: List[Tuple[str, int]] = []
    empty = []
    for cls in sorted(class_to_idx):
        files = sorted(per_class[cls])  # (folder, name): sorted(os.walk)
        if not files:
            empty.append(cls)
        out.extend((posixpath.join(f, b), class_to_idx[cls])
                   for f, b in files)
    if empty:
        msg = "Found no valid file for the classes %s. " % ", ".join(
            sorted(empty))
        if extensions is not None:
            msg += "Supported extensions are: %s" % ", ".join(extensions)
        raise FileNotFoundError(msg)
    return out


class ImageFolder(CacheDataset):
    """torchvision.datasets.ImageFolder over dlcache: `dataset`'s files
    under `prefix` laid out as prefix/CLASS/.../FILE, read through the
    cache. ds[i] is (transform(image), target_transform(class index)).

    Attributes as torchvision's: classes (sorted class folder names),
    class_to_idx, samples / imgs (list of (key, class index)), targets;
    plus keys (the samples' keys, what get_batch reads).

    Built from the dataset's listing through dlcached (Client.list), or
    `lister(dataset, prefix)` where given. A class folder with no valid
    file raises FileNotFoundError, as torchvision does (a folder without
    any file does not show in a listing, so it is no class here).

    loader: bytes -> sample (default pil_loader: an RGB PIL image).
    Other arguments as CacheDataset (socket, client_name, timeouts,
    return_keys). Use PlannedSampler as the DataLoader's sampler for the
    one epoch order, epoch plans and resume.
    """

    def __init__(self, dataset: str, prefix: str = "",
                 socket: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None,
                 loader: Callable[[Any], Any] = pil_loader,
                 is_valid_file: Optional[Callable[[str], bool]] = None,
                 extensions: Optional[Tuple[str, ...]] = None,
                 lister: Optional[Lister] = None, return_keys: bool = False,
                 client_name: str = "torch", connect_timeout: float = 10.0,
                 rpc_timeout: float = 60.0, **renamed: Any) -> None:
        from .._listing import refuse_renamed
        refuse_renamed(renamed, "ImageFolder")
        if extensions is None and is_valid_file is None:
            extensions = IMG_EXTENSIONS
        self.loader = loader
        self.extensions = extensions
        self.root = normalize_prefix(prefix)
        if lister is not None:
            entries = list_dataset(dataset, prefix, lister=lister)
        else:
            from .._client import Client
            with Client(socket) as c:
                entries = list_dataset(dataset, prefix, client=c)
        names = [e.name for e in entries]
        self.classes, self.class_to_idx = find_classes(names, prefix)
        self.samples = make_dataset(names, self.class_to_idx, prefix,
                                    extensions, is_valid_file)
        self.imgs = self.samples
        targets = [t for _, t in self.samples]
        super().__init__([k for k, _ in self.samples], dataset=dataset,
                         socket=socket, transform=None, output="bytes",
                         copy=True, return_keys=return_keys,
                         client_name=client_name,
                         connect_timeout=connect_timeout,
                         rpc_timeout=rpc_timeout, targets=targets,
                         target_transform=target_transform)
        self.transform = transform

    def _sample(self, index: int, data: Any) -> Any:
        return super()._sample(index, self.loader(data))
