"""Listing a dataset through dlcached (Client.list), and the argument
checks the loaders share (renamed parameters, targets). No torch needed."""

import os
from collections.abc import Mapping
from typing import (Any, Callable, Dict, Iterable, List, NamedTuple,
                    Optional, Sequence, Union)

__all__ = ["FileEntry", "list_dataset", "local_lister", "target_getter",
           "refuse_renamed", "normalize_prefix"]

try:  # dlcache.FileEntry where the Client lists datasets (issue 30)
    from ._client import FileEntry  # type: ignore[attr-defined]
except ImportError:
    class FileEntry(NamedTuple):  # type: ignore[no-redef]
        """One file of a dataset: name relative to the dataset's root
        ('/'-separated, a get_batch key), size in bytes, mtime in ns."""
        name: str
        size: int
        mtime_ns: int

Lister = Callable[[str, str], Iterable[FileEntry]]
Targets = Union[Sequence[Any], Mapping, Callable[[str], Any], None]

# Parameters renamed before 1.0: old name -> new name.
_RENAMED = {"socket_path": "socket"}


def refuse_renamed(kwargs: Dict[str, Any], where: str) -> None:
    """Raises TypeError for leftover keyword arguments, naming the new name
    of a renamed one."""
    for key in kwargs:
        if key in _RENAMED:
            raise TypeError("%s: %s= was renamed %s= (dlcache is pre-1.0 "
                            "and keeps one name per parameter)"
                            % (where, key, _RENAMED[key]))
    if kwargs:
        raise TypeError("%s got unexpected keyword argument(s): %s"
                        % (where, ", ".join(sorted(kwargs))))


def normalize_prefix(prefix: str) -> str:
    """"train/" or "/train" -> "train"; "" stays "" (the root)."""
    return (prefix or "").strip("/")


def local_lister(root: str) -> Lister:
    """A lister over a local directory laid out as the dataset (its source
    mounted here, say): the same entries as Client.list, sorted by name.
    For tests and for datasets whose source this host can read."""

    def lister(dataset: str, prefix: str = "") -> List[FileEntry]:
        base = os.path.join(root, normalize_prefix(prefix))
        out = []
        for dirpath, _, files in os.walk(base, followlinks=True):
            for f in files:
                full = os.path.join(dirpath, f)
                st = os.stat(full)
                name = os.path.relpath(full, root).replace(os.sep, "/")
                out.append(FileEntry(name, st.st_size, st.st_mtime_ns))
        out.sort(key=lambda e: e.name)
        return out

    return lister


def list_dataset(dataset: str, prefix: str = "", socket: Optional[str] = None,
                 lister: Optional[Lister] = None,
                 client: Any = None) -> List[FileEntry]:
    """The dataset's files under `prefix` (names relative to the dataset's
    root), sorted by name: lister(dataset, prefix) when given, else
    Client.list through dlcached."""
    prefix = normalize_prefix(prefix)
    if lister is not None:
        entries = list(lister(dataset, prefix))
    else:
        from ._client import UNIMPLEMENTED, Client, DlcacheError
        own = client is None
        c = Client(socket) if own else client
        try:
            fn = getattr(c, "list", None)
            if fn is None:
                raise DlcacheError(
                    UNIMPLEMENTED, "listing dataset %r needs Client.list "
                    "(a newer dlcache); pass keys=, or lister=" % dataset)
            entries = list(fn(dataset, prefix))
        finally:
            if own:
                c.close()
    entries = [e if isinstance(e, FileEntry) else FileEntry(*e)
               for e in entries]
    if prefix:
        head = prefix + "/"
        entries = [e for e in entries if e.name.startswith(head)]
    entries.sort(key=lambda e: e.name)
    return entries


class _TargetOf:
    """index -> target; picklable (DataLoader workers may be spawned)."""

    def __init__(self, kind: str, targets: Any, keys: Sequence[str]):
        self.kind = kind
        self.targets = targets
        self.keys = keys

    def __call__(self, i: int) -> Any:
        if self.kind == "seq":
            return self.targets[i]
        if self.kind == "map":
            return self.targets[self.keys[i]]
        return self.targets(self.keys[i])


def target_getter(targets: Targets, keys: Sequence[str]
                  ) -> Optional[Callable[[int], Any]]:
    """index -> target for `targets`: a sequence aligned with `keys`, a
    mapping key -> target, or a callable key -> target; None for None."""
    if targets is None:
        return None
    if isinstance(targets, Mapping):
        return _TargetOf("map", targets, keys)
    if callable(targets) and not hasattr(targets, "__len__"):
        return _TargetOf("call", targets, keys)
    if len(targets) != len(keys):
        raise ValueError("targets has %d entries for %d keys"
                         % (len(targets), len(keys)))
    return _TargetOf("seq", targets, keys)
