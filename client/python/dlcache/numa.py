"""Which NUMA node a CUDA device hangs off, for dlcached's NUMA placement.

A client that tells dlcached its GPU's NUMA node when it connects
(Client(numa_node=...), which GpuLoader does by itself) gets the chunks its
misses fill placed on that node's memory, so that the host-to-device copies
read local memory (docs/numa.md). Every function here returns -1 / None
when it cannot tell (no torch, no CUDA, a VM whose firmware does not say,
an old libdlcache_c.so): -1 means "no preference" to dlcached.

torch is imported only inside the CUDA helpers.
"""

import ctypes
import glob
import os

from . import _lib

__all__ = ["pci_numa_node", "cuda_device_pci_bus_id", "cuda_device_numa_node"]


def pci_numa_node(pci_bus_id):
    """The NUMA node of PCI device `pci_bus_id` ("0000:3b:00.0"; CUDA's and
    NVML's upper-case and 8-digit-domain forms work too), as the kernel
    reports it in /sys/bus/pci/devices/<addr>/numa_node; -1 when unknown.
    Uses libdlcache_c.so's dlc_pci_numa_node (one parser for C, C++ and
    Python)."""
    if not pci_bus_id:
        return -1
    lib = _lib.load()
    fn = getattr(lib, "dlc_pci_numa_node", None)
    if fn is None:
        return -1
    node = ctypes.c_int(-1)
    if fn(pci_bus_id.encode(), ctypes.byref(node)) != 0:
        return -1
    return node.value


def _bus_id_by_uuid(uuid, proc_root="/proc"):
    # The NVIDIA driver lists its GPUs as /proc/driver/nvidia/gpus/<addr>/
    # with a "GPU UUID:" line in `information`; torch gives the UUID even
    # where its device properties lack the PCI fields.
    want = str(uuid).lower()
    if not want.startswith("gpu-"):
        want = "gpu-" + want
    for info in sorted(glob.glob(os.path.join(
            proc_root, "driver/nvidia/gpus/*/information"))):
        try:
            with open(info) as f:
                text = f.read().lower()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("gpu uuid:") and line.split(":", 1)[1].strip() \
                    == want:
                return os.path.basename(os.path.dirname(info))
    return None


def cuda_device_pci_bus_id(device):
    """PCI address of CUDA device `device` (an index or torch.device, as
    torch numbers them: after CUDA_VISIBLE_DEVICES), or None."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        dev = torch.device(device) if not isinstance(device, int) else \
            torch.device("cuda", device)
        if dev.type != "cuda":
            return None
        index = dev.index if dev.index is not None else \
            torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
    except Exception:  # torch missing or too old, bad device: no answer
        return None
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None and getattr(props, "pci_device_id", None) is not None:
        return "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0) or 0,
                                     bus, props.pci_device_id)
    uuid = getattr(props, "uuid", None)
    return _bus_id_by_uuid(uuid) if uuid is not None else None


def cuda_device_numa_node(device):
    """NUMA node of CUDA device `device`; -1 when it cannot be told."""
    bus_id = cuda_device_pci_bus_id(device)
    return pci_numa_node(bus_id) if bus_id else -1
