"""tokamax's autotuner, with the configs that cannot fit on the target left out before it compiles them.

    from vmem_lsp.tuners.tokamax import PruningAutotuner

    for ba in tokamax.autotuning.get_bound_args(f, *args):
        data = ba.autotune(autotuner=PruningAutotuner(targets="v5e"))

tokamax's Autotuner compiles every config in a thread pool and keeps a config's exception as its
result. This one first asks vmem-lsp which configs fit on `targets` (vmem_lsp.decide: the layout
model where it is sure, the real compiler near the frontier, deviceless), hands only the others to
tokamax, and puts a `DoesNotFit` (what vmem-lsp found) in the result for each config it skipped, as
tokamax records a config that failed to compile. A config vmem-lsp could not decide is kept: it is
never dropped unchecked.

vmem-lsp's worker runs each config as the call `configured_op(blob, *arrays, **config)`: the op's
class and settings and the call's other arguments travel pickled in `blob`, the arrays as shape
texts, the config's fields as keywords (so the sweep orders configs by them). This module imports
tokamax; vmem-lsp itself does not need it.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import pickle
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from tokamax._src.autotuning.autotuner import Autotuner, AutotuningData

logger = logging.getLogger(__name__)

LITERALS = (bool, int, float, type(None))  # a config field the example text can write as it is


class DoesNotFit(Exception):
    """A config vmem-lsp found cannot fit on a target: tokamax did not compile it."""

    def __init__(self, config: object, why: str):
        super().__init__(f"skipped by vmem-lsp: {why}")
        self.config, self.why = config, why


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where an array stood among the call's arguments: the worker puts the traced one there."""

    index: int


SMALL_CONSTANT = 4096  # elements: a numpy array this small travels as it is (tokamax's representative group sizes)


def sent_as_shape(value: object) -> bool:
    """An argument the worker traces from its shape: a jax array or ShapeDtypeStruct, a large
    numpy array. A small numpy array stays a constant, as the call gave it."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return False
    return not isinstance(value, np.ndarray) or value.size > SMALL_CONSTANT


def configured_op(blob: str, *arrays: object, **config_fields: object) -> object:
    """In vmem-lsp's worker: the op `blob` describes, with the config of these fields, called on
    the call's arguments with `arrays` (the worker's traced shapes) where the arrays were."""
    op_class, op_fields, config_class, tree, leaves = pickle.loads(base64.b64decode(blob))
    op = op_class(**op_fields, config=config_class(**config_fields))
    filled = [arrays[leaf.index] if isinstance(leaf, Slot) else leaf for leaf in leaves]
    args, kwargs = jax.tree_util.tree_unflatten(tree, filled)
    return op(*args, **kwargs)


@dataclasses.dataclass(frozen=True)
class Call:
    """One autotuning call as vmem-lsp's API takes it: `configured_op(*args, **fields)` per config."""

    args: tuple[object, ...]  # the blob's text, then each array
    fields: list[dict[str, object]]  # each config's fields as keywords, in the configs' order


def as_call(fn_factory: Callable[[Any], Any], configs: list, args: tuple, kwargs: dict) -> Call | str:
    """The call vmem-lsp checks for each config, or why these configs cannot be checked (kept, then)."""
    op = fn_factory(configs[0])
    if not dataclasses.is_dataclass(op) or not callable(op) or not hasattr(op, "replace"):
        return f"the factory makes a {type(op).__name__}, not a tokamax op"
    fields = []
    for config in configs:
        if not dataclasses.is_dataclass(config) or type(config) is not type(configs[0]):
            return f"a config of type {type(config).__name__}, not the op's config dataclass"
        found = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
        if not all(isinstance(v, LITERALS) for v in found.values()):
            return f"a config field that is not a number or a flag ({found})"
        fields.append(found)
    arrays: list[object] = []

    def slot(leaf: object) -> object:
        if not sent_as_shape(leaf):
            return leaf
        arrays.append(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))  # type: ignore[attr-defined]
        return Slot(len(arrays) - 1)

    # Flattened, not mapped: a pytree node may check its leaves when rebuilt (tokamax's GroupSizes
    # wants an integer array), which a Slot is not; the worker rebuilds it around traced arrays.
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    sent = [slot(leaf) for leaf in leaves]
    settings = {
        f.name: getattr(op, f.name) for f in dataclasses.fields(op) if f.init and f.name not in ("config", "vjp")
    }
    try:
        blob = base64.b64encode(pickle.dumps((type(op), settings, type(configs[0]), tree, sent))).decode()
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        return f"the op or its arguments cannot be sent to vmem-lsp's worker ({error})"
    return Call((repr(blob), *arrays), fields)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PruningAutotuner(Autotuner):
    """tokamax's Autotuner that compiles only the configs vmem-lsp does not rule out on `targets`
    ("v5e", "v5e,v7x", a GPU's name); the skipped ones are in the result as DoesNotFit."""

    targets: str | tuple[str, ...] = "v6e"
    budget_compiles: int | None = None  # vmem-lsp's own compiles near the frontier; None: as many as needed

    def skipped(self, fn_factory: Callable[[Any], Any], configs: set, *args: Any, **kwargs: Any) -> dict:
        """config -> DoesNotFit for each config vmem-lsp finds cannot fit on a target."""
        from ..api import decide, why_not

        listed = list(configs)
        if not listed:
            return {}
        call = as_call(fn_factory, listed, args, kwargs)
        if isinstance(call, str):
            logger.warning("vmem-lsp: configs not checked, all kept: %s", call)
            return {}
        started = time.perf_counter()
        decided = decide(configured_op, call.args, call.fields, self.targets, budget_compiles=self.budget_compiles)
        out = {  # the reason of the chip it overflows on, not of one that left it undecided
            config: DoesNotFit(config, why_not(over))
            for config, d in zip(listed, decided)
            if (over := next((v for v in d.verdicts if v.fits is False), None)) is not None
        }
        logger.info(
            "vmem-lsp: %d of %d configs cannot fit on %s, skipped (%.1f s)",
            len(out),
            len(listed),
            self.targets,
            time.perf_counter() - started,
        )
        return out

    def autotune(self, fn_factory: Callable[[Any], Any], configs: set, *args: Any, **kwargs: Any) -> AutotuningData:
        skipped = self.skipped(fn_factory, configs, *args, **kwargs)
        kept = {c for c in configs if c not in skipped}
        tuned = Autotuner.autotune(self, fn_factory, kept, *args, **kwargs) if kept else {}
        return AutotuningData({**tuned, **skipped})
