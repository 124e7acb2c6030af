"""Where and how the torch backend runs a model: ``--device``, ``--dtype``, ``--device-map`` and
``--max-memory``, checked before anything is read, and turned into transformers' loading arguments.

    --device cpu|cuda|mps|auto      the one device the whole model is moved to (auto: cuda, else mps, else cpu)
    --dtype float32|bfloat16|float16
    --device-map auto|balanced|balanced_low_0|sequential
                                    accelerate splits the model's layers across the GPUs, the CPU and the disk
    --max-memory 0=20GiB,1=20GiB,cpu=64GiB,disk
                                    the budget of each device under --device-map: a GPU by its index (or
                                    cuda:N), cpu, mps; sizes as accelerate reads them (bytes, KB, MB, GB,
                                    KiB, MiB, GiB); ``disk`` lets what fits nowhere else be read from the disk

A layer offloaded to the CPU or the disk is moved to the execution device for its forward pass
(accelerate's hooks); the disk's weights are read from the checkpoint or a folder under a temporary
directory attn creates and removes. torch and accelerate are imported only inside these functions.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

from attncli.env import extras
from attncli.errors import BadInput
from attncli.io.textio import visible

DEVICES = ("auto", "cpu", "cuda", "mps")  # auto: cuda if torch sees one, else mps, else cpu
DTYPES = ("float32", "bfloat16", "float16")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's strategies
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?", re.IGNORECASE)
MAX_MEMORY_FORM = "DEVICE=SIZE,... (e.g. 0=20GiB,cpu=64GiB,disk)"


@dataclass(frozen=True)
class Placement:
    """The four options as given (None: not given); ``check()`` refuses what cannot work."""

    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None
    max_memory: str | None = None

    def given(self) -> list[str]:
        """The options given, as the command line spells them ("--device cuda")."""
        return [f"--{k.replace('_', '-')} {v}" for k, v in vars(self).items() if v is not None]

    def check(self) -> None:
        """Every refusal that needs no model: unknown names, a device torch does not see, a
        malformed --max-memory, --max-memory without --device-map, --device beside --device-map."""
        if self.device is not None and self.device not in DEVICES:
            raise BadInput(f"unknown --device '{visible(self.device)}': choose one of {', '.join(DEVICES)}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise BadInput(f"unknown --dtype '{visible(self.dtype)}': choose one of {', '.join(DTYPES)}")
        if self.device_map is not None and self.device_map not in DEVICE_MAPS:
            raise BadInput(f"unknown --device-map '{visible(self.device_map)}': choose one of {', '.join(DEVICE_MAPS)}")
        if self.max_memory is not None and self.device_map is None:
            raise BadInput("--max-memory is the budget of each device under --device-map: add --device-map auto")
        if self.device_map is not None and self.device is not None:
            raise BadInput(f"--device-map {self.device_map} spreads the model over the devices itself: drop "
                           f"--device {self.device} (--max-memory 0=0GiB,cpu=... keeps it off a GPU)")
        if self.device_map is not None and importlib.util.find_spec("accelerate") is None:
            raise BadInput(f"--device-map {self.device_map} needs accelerate, which is not installed: "
                           f"{extras.install_command('big')}")
        if self.device in ("cuda", "mps"):
            torch_device(_torch_or_none(), self.device)
        if self.max_memory is not None:
            parse_max_memory(self.max_memory, _torch_or_none())

    def load_kwargs(self, torch: Any) -> dict[str, Any]:
        """transformers' from_pretrained arguments for the placement (the dtype aside)."""
        if self.device_map is None:
            return {}
        kwargs: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            budget, _ = parse_max_memory(self.max_memory, torch)
            kwargs["max_memory"] = budget
        return kwargs


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_device(torch: Any, device: str) -> str:
    """The torch device for --device (auto: cuda, else mps, else cpu); BadInput when it is absent."""
    if torch is None:
        has = {"cpu": True, "cuda": False, "mps": False}
    else:
        mps = getattr(torch.backends, "mps", None)
        has = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    if device == "auto":
        return next(d for d in ("cuda", "mps", "cpu") if has[d])
    if not has.get(device, False):
        raise BadInput(f"--device {device}: torch finds no {device.upper()} device here (its "
                       f"{'torch.cuda' if device == 'cuda' else 'torch.backends.mps'}.is_available() is False): "
                       "use --device cpu or auto")
    return device


def parse_size(text: str) -> int:
    """Bytes in "20GiB", "200MB", "1.5GB" or "4096" (decimal KB/MB/GB, binary KiB/MiB/GiB, as accelerate)."""
    m = SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    unit = (m.group(2) or "B").upper()
    scale = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    return int(float(m.group(1)) * scale)


def parse_max_memory(spec: str, torch: Any = None) -> tuple[dict[int | str, int], bool]:
    """--max-memory "0=2GiB,cpu=4GiB,disk" -> ({0: bytes, "cpu": bytes}, disk allowed). A GPU key
    names a device torch sees (``torch`` None: none is checked); BadInput on anything else."""
    budget: dict[int | str, int] = {}
    disk = False
    for part in (p.strip() for p in spec.split(",")):
        if part.lower() == "disk":
            disk = True
            continue
        key, eq, size = part.partition("=")
        key = key.strip().lower()
        if not eq or not key:
            raise BadInput(f"--max-memory '{visible(spec)}': '{visible(part)}' is not DEVICE=SIZE: write {MAX_MEMORY_FORM}")
        if key.startswith("cuda:"):
            key = key[5:]
        if key.isdigit():
            index: int | str = int(key)
            count = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
            if index >= count:
                raise BadInput(f"--max-memory names GPU {index}, but torch finds {count} CUDA device"
                               f"{'' if count == 1 else 's'} here")
        elif key in ("cpu", "mps"):
            index = key
            if key == "mps":
                torch_device(torch, "mps")
        else:
            raise BadInput(f"--max-memory '{visible(spec)}': unknown device '{visible(key)}': a GPU index (0, 1, "
                           f"...), cpu, mps or disk")
        if index in budget:
            raise BadInput(f"--max-memory '{visible(spec)}' names {index} twice")
        try:
            budget[index] = parse_size(size)
        except ValueError:
            raise BadInput(f"--max-memory '{visible(spec)}': '{visible(size)}' is not a size: write e.g. 200MB, "
                           "2GiB or 4096") from None
    if not budget:
        raise BadInput(f"--max-memory '{visible(spec)}' names no device: write {MAX_MEMORY_FORM}")
    return budget, disk


def offload_folder(owner: Any) -> str:
    """A temporary folder for accelerate's disk offload, removed with ``owner`` (or at exit)."""
    folder = tempfile.mkdtemp(prefix="attn-offload-")
    weakref.finalize(owner, shutil.rmtree, folder, ignore_errors=True)
    return folder


def quiet_accelerate() -> None:
    """accelerate warns on stderr that offloaded weights sit on the meta device: what --device-map asked for."""
    import logging

    logging.getLogger("accelerate.big_modeling").setLevel(logging.ERROR)


def check_disk(placement: Placement, device_map: dict[str, Any], name: str) -> None:
    """A model placed partly on the disk without ``disk`` in --max-memory: it did not fit the budget."""
    if placement.max_memory is None or "disk" not in set(map(str, device_map.values())):
        return
    if not parse_max_memory(placement.max_memory, _torch_or_none())[1]:
        on_disk = [k or "the whole model" for k, v in device_map.items() if str(v) == "disk"]
        more = f" and {len(on_disk) - 3} more" if len(on_disk) > 3 else ""
        raise BadInput(f"model '{visible(name)}' does not fit in --max-memory {visible(placement.max_memory)}: "
                       f"accelerate would read {visible(', '.join(on_disk[:3]))}{more} from the disk: add ',disk' "
                       "to allow that, or raise the budget")


def execution_device(device_map: dict[str, Any]) -> str:
    """Where the inputs go under a device map: the first GPU it uses, else the CPU."""
    for value in device_map.values():
        if isinstance(value, int) or (isinstance(value, str) and value.startswith(("cuda", "mps"))):
            return f"cuda:{value}" if isinstance(value, int) else value
    return "cpu"
