"""One training loop for the course's toy models: seeded, on one thread, a fresh batch every step.

Every toy model of the course trains the same way:

* its initial weights are drawn under ``torch.manual_seed(seed)`` in a forked random state
  (:func:`seeded`), so the caller's random stream is left alone;
* every step draws a fresh batch from a ``torch.Generator`` seeded with ``seed``, on the CPU, so a run
  starts from the same numbers on every machine;
* it runs on one thread (the matrices are tiny: more threads only add waiting, and one thread makes the
  sums, hence the whole run, the same on every machine);
* ``record(step)`` is called before the first step, every ``record_every`` steps and after the last one,
  to keep checkpoints (attention weights, scores, ...) in memory.

Shapes are whatever the model's own ``step_loss`` uses.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import numbers
import os
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from ._checks import check_positive_int

__all__ = ["seeded", "one_thread", "train_loop", "remembered"]


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")


def seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` under ``torch.manual_seed(seed)``; the caller's random stream is left as it was."""
    _check_seed(seed)
    if not callable(build):
        raise TypeError("build must be callable with no arguments, e.g. lambda: MyModel(...)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one CPU thread, then restore the number of threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train_loop(model: nn.Module, step_loss: Callable[[nn.Module, torch.Generator], torch.Tensor], *,
               num_steps: int, lr: float, seed: int,
               optimizer: type[torch.optim.Optimizer] = torch.optim.Adam,
               record: Callable[[int], None] | None = None, record_every: int = 1) -> list[float]:
    """Train ``model`` for ``num_steps`` steps; return the loss of every step.

    Args:
        model: the module to train (already built, e.g. with :func:`seeded`, and on its device).
        step_loss: ``step_loss(model, generator)`` draws a fresh batch from ``generator`` and returns its loss.
        num_steps, lr: how long and how fast; ``optimizer`` is the class, built as
            ``optimizer(model.parameters(), lr=lr)`` (Adam by default).
        seed: seed of the batch generator (a ``torch.Generator`` on the CPU).
        record: ``record(step)`` is called with the model in ``eval()`` mode before the first step (step 0),
            every ``record_every`` steps and after the last step; training resumes in ``train()`` mode.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not callable(step_loss):
        raise TypeError("step_loss must be callable as step_loss(model, generator)")
    check_positive_int("num_steps", num_steps)
    check_positive_int("record_every", record_every)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    _check_seed(seed)
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise TypeError(f"optimizer must be an optimiser class such as torch.optim.Adam, got {optimizer!r}")
    if record is not None and not callable(record):
        raise TypeError("record must be callable as record(step), or None")
    generator = torch.Generator().manual_seed(seed)
    opt = optimizer(model.parameters(), lr=lr)
    losses: list[float] = []
    with one_thread():
        for step in range(num_steps + 1):
            if record is not None and (step % record_every == 0 or step == num_steps):
                model.eval()
                with torch.no_grad():
                    record(step)
            if step == num_steps:
                break
            model.train()
            loss = step_loss(model, generator)  # a fresh batch, drawn from the seeded generator
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    return losses


# What a remembered call may depend on: plain values, tensors, lists, tuples and dicts of them, the library's classes
# and the course's own task objects, all compared by value at the time of the call.
_PLAIN = (type(None), bool, int, float, str, torch.device, torch.dtype)
_LIBRARIES = ("helpers", "torch")
CACHE_VARIABLE = "ATTENTION_COURSE_TRAINING_CACHE"


class _NotRemembered(Exception):
    """An argument whose value cannot be described (e.g. a class defined in a notebook): train again."""


def _from_library(cls: type, libraries: tuple[str, ...] = _LIBRARIES) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module.split(".")[0] in libraries


def _describe(value):
    """``value`` as nested tuples of plain values: equal descriptions mean equal arguments."""
    if type(value) in _PLAIN:
        return type(value).__name__, repr(value)
    if isinstance(value, torch.Tensor):
        try:
            data = value.detach().cpu().contiguous().reshape(-1)
        except (RuntimeError, NotImplementedError) as error:  # e.g. a tensor on the meta device has no values
            raise _NotRemembered from error
        digest = hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()
        return "tensor", str(value.dtype), tuple(value.shape), str(value.device), value.requires_grad, digest
    if type(value) in (list, tuple):
        return type(value).__name__, tuple(_describe(item) for item in value)
    if type(value) is dict:
        return "dict", tuple((_describe(k), _describe(v)) for k, v in value.items())
    if isinstance(value, type) and _from_library(value):
        return "class", value.__module__, value.__qualname__
    if _from_library(type(value), ("helpers",)) and not isinstance(value, nn.Module) and hasattr(value, "__dict__"):
        return "object", type(value).__module__, type(value).__qualname__, _describe(vars(value))
    raise _NotRemembered


@functools.cache
def _source_digest() -> str:
    """SHA-256 of the course package's source files: a saved run is only used by the code that made it."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _in_a_kernel() -> bool:
    """Whether this process is a Jupyter kernel (a notebook's), not, say, a unit test that must train."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    return kernelapp is not None and kernelapp.IPKernelApp.initialized()


def _saved_path(train: Callable, key) -> Path | None:
    directory = os.environ.get(CACHE_VARIABLE)
    if not directory or not _in_a_kernel():
        return None
    full = repr((key, torch.__version__, _source_digest()))
    name = f"{train.__module__}.{train.__qualname__}-{hashlib.sha256(full.encode()).hexdigest()[:40]}.pt"
    return Path(directory) / name


def _load(path: Path | None):
    if path is None or not path.is_file():
        return None
    try:
        return (torch.load(path, weights_only=False),)  # a file this function wrote (see _save)
    except Exception:  # a partial or foreign file: train again
        return None


def _save(path: Path | None, result) -> None:
    if path is None:
        return
    part = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".part", delete=False) as part:
            torch.save(result, part)
        os.replace(part.name, path)  # whole or not at all, also when two processes save the same run
    except Exception:  # e.g. a result that cannot be pickled: it is only not saved
        if part is not None:
            with contextlib.suppress(OSError):
                os.remove(part.name)


def remembered(train: Callable, *, keep: int = 16) -> Callable:
    """``train`` that, called again with the same arguments, returns a copy of its first result instead of training.

    A seeded run on one thread is a function of its arguments, so a notebook cell run a second time needs not train
    a second time: the copy (``copy.deepcopy``) is what training again would return, and changing it leaves the
    remembered run as it was. Arguments are compared by value when the call is made (numbers, strings, devices,
    tensors, lists and dicts of them, classes from torch or from this package, this package's task objects), under
    the default dtype in force; a call with any other argument (say, a class defined in a notebook) trains. The
    last ``keep`` runs are kept in memory.

    In a notebook's kernel, if the environment variable ``ATTENTION_COURSE_TRAINING_CACHE`` names a directory
    (``make test`` sets it), runs are also saved there and loaded by other kernels, keyed by the arguments, the
    torch version and this package's source: the test suite executes every notebook more than once (strict nbval,
    JupyterLab in a browser, the Colab-like stack), and each run trains once. Other processes (unit tests) train.
    """
    signature = inspect.signature(train)
    runs: OrderedDict = OrderedDict()

    @functools.wraps(train)
    def wrapper(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return train(*args, **kwargs)  # let the function report its own argument error
        bound.apply_defaults()
        try:
            key = (tuple((name, _describe(value)) for name, value in bound.arguments.items()),
                   str(torch.get_default_dtype()))
        except _NotRemembered:
            return train(*args, **kwargs)
        if key not in runs:
            path = _saved_path(train, key)
            loaded = _load(path)
            if loaded is not None:
                runs[key] = loaded[0]
            else:
                runs[key] = train(*args, **kwargs)
                _save(path, runs[key])
            while len(runs) > keep:
                runs.popitem(last=False)
        runs.move_to_end(key)
        return copy.deepcopy(runs[key])

    wrapper.forget = runs.clear
    return wrapper
