"""Find host-device synchronisations on any device, the CPU included.

On a GPU, any call that needs a tensor's *value* on the host (``.item()``, ``if tensor:``, ``.tolist()``, a
boolean-mask index whose output size depends on the data, ...) waits for every queued kernel: the GPU drains and
the Python thread stalls. On the CPU these calls are free, so a slow GPU loop looks fine there. ``SyncDetector``
intercepts the primitives that would synchronise (at the Python level with a ``TorchFunctionMode`` and at the
operator level with a ``TorchDispatchMode``) whatever the device, so a CPU test can prove a loop sync-free.

    with SyncDetector():                 # raises HostSyncError at the first sync
        collect(...)
    with SyncDetector(raise_on_sync=False) as d:
        collect(...)
    d.events                             # ['Tensor.item', 'aten.nonzero', ...]

Reads that are meant (one per collect round or update, for logging) are wrapped in ``allowed_sync()``, which
names them in the code and silences the detector there.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Literal

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_allowed_depth = 0


@contextlib.contextmanager
def allowed_sync():
    """A deliberate host read (a statistic for the log): not reported by a SyncDetector."""
    global _allowed_depth
    _allowed_depth += 1
    try:
        yield
    finally:
        _allowed_depth -= 1


class HostSyncError(RuntimeError):
    """A host-device synchronisation where none is allowed."""


_TENSOR_METHODS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
                   "__format__", "__array__"}
"""Tensor methods that hand a value (or the whole tensor) to the host."""
_TORCH_FUNCTIONS = {"allclose", "isclose_all"}
"""Functions returning a Python value computed from tensor values (their operators are caught below)."""
_FROM_HOST = {"tensor", "as_tensor", "asarray"}
"""Tensor constructors: a copy from host memory when given Python data."""
_ATEN_SYNCS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::argwhere", "aten::masked_select",
               "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::equal",
               "aten::is_nonzero", "aten::bincount"}
"""Operators that read values on the host (an output size, a Python result), from our code or a library's."""


class SyncDetector:
    """Raise (default) or record on every host-device synchronisation primitive inside the ``with`` block."""

    def __init__(self, raise_on_sync: bool = True):
        self.raise_on_sync = raise_on_sync
        self.events: list[str] = []
        self._inside_reported = 0
        self._modes = (_FunctionLevel(self), _DispatchLevel(self))

    def report(self, name: str) -> None:
        if _allowed_depth or self._inside_reported:
            return
        self.events.append(name)
        if self.raise_on_sync:
            raise HostSyncError(f"host-device synchronisation: {name}")

    def __enter__(self) -> SyncDetector:
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc) -> Literal[False]:
        for m in reversed(self._modes):
            m.__exit__(*exc)
        return False


def _name(func) -> str:
    return getattr(func, "__name__", str(func))


class _FunctionLevel(TorchFunctionMode):
    def __init__(self, detector: SyncDetector):
        super().__init__()
        self.detector = detector

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
        is_method = owner is torch.Tensor or (isinstance(owner, type) and issubclass(owner, torch._C.TensorBase))
        sync = None
        if is_method and name in _TENSOR_METHODS:
            sync = f"Tensor.{name}"
        elif name in _TORCH_FUNCTIONS:
            sync = f"{name}"
        elif name in _FROM_HOST and args and not isinstance(args[0], torch.Tensor):
            sync = f"torch.{name}(host data)"
        if sync is None:
            return func(*args, **kwargs)
        self.detector.report(sync)
        self.detector._inside_reported += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.detector._inside_reported -= 1


class _DispatchLevel(TorchDispatchMode):
    def __init__(self, detector: SyncDetector):
        super().__init__()
        self.detector = detector

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _ATEN_SYNCS:
            self.detector.report(name)
        elif name == "aten::index" and len(args) > 1 and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None):
            self.detector.report("aten::index with a boolean mask")
        elif name == "aten::repeat_interleave" and func._overloadname == "Tensor" and \
                kwargs.get("output_size") is None:
            self.detector.report("aten::repeat_interleave without output_size")
        return func(*args, **kwargs)


def cuda_sync_sites(fn) -> list[str]:
    """Run ``fn`` on a CUDA device under CUDA's own sync-debug mode (``torch.cuda.set_sync_debug_mode``) and return
    where each synchronising call it reported came from (``file:line``): a second witness beside ``SyncDetector``,
    which sees CUDA's own synchronisations too (inside torch, in copies), but only where a GPU runs."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


__all__ = ["SyncDetector", "HostSyncError", "allowed_sync", "cuda_sync_sites"]
