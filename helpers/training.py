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
import inspect
import numbers
from collections import OrderedDict
from collections.abc import Callable, Iterator

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


# What a remembered call may depend on: plain values, compared by value (not objects a caller could change).
_PLAIN = (type(None), bool, int, float, str, torch.device, torch.dtype)


def remembered(train: Callable, *, keep: int = 4) -> Callable:
    """``train`` that, called again with the same plain arguments in the same process, returns a copy of its first result.

    A seeded run on one thread is a function of its arguments, so a notebook cell run a second time needs not train
    a second time: the copy (``copy.deepcopy``) is what training again would return, and changing it leaves the
    remembered run as it was. Only calls whose arguments are all plain values (numbers, strings, ``None``,
    devices) are remembered, under the default dtype in force; the last ``keep`` of them are kept.
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
        values = tuple(bound.arguments.items())
        if not all(type(value) in _PLAIN for _, value in values):
            return train(*args, **kwargs)
        key = (values, torch.get_default_dtype())
        if key not in runs:
            runs[key] = train(*args, **kwargs)
            while len(runs) > keep:
                runs.popitem(last=False)
        runs.move_to_end(key)
        return copy.deepcopy(runs[key])

    wrapper.forget = runs.clear
    return wrapper
