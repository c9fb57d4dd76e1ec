"""Sharded GRPO training and generation on a device mesh (ZeRO-3 style FSDP, tensor parallelism, data parallelism).

A mesh names three axes, ``data x fsdp x tensor`` (``parse_mesh("data=2,fsdp=2,tensor=1")``; an axis left out
has size 1). Each parameter gets a ``PartitionSpec`` from its module and parameter name (:data:`RULES`):

* ``fsdp``: every weight matrix is split along its model-width (``d_model``) dimension, and its optimiser
  state with it (ZeRO-3: each device keeps ``1/F`` of the parameters, the Adam moments and the gradient;
  XLA gathers a layer's weights where it runs and reduce-scatters its gradient);
* ``tensor``: the attention projections are split by heads (query and key/value heads, so the KV cache
  splits with them) and the MLP by columns of its hidden width (Megatron's column/row split: ``gate, up``
  by output columns, ``down`` by input rows);
* ``data`` and ``fsdp`` together split the batch rows;
* norms, biases outside the head dimension and the step counters are tiny and replicated.

Nothing here is a hand-written collective: arrays are placed with ``NamedSharding`` and the jitted
programs (:func:`longhorizon.lm.grpo.update`, :func:`longhorizon.lm.generate.generate`) run unchanged,
partitioned by XLA from their inputs' shardings; the update's outputs are pinned to the inputs' shardings
(``out_shardings``) so parameters and optimiser state stay sharded from step to step. One hint inside the
models (:func:`longhorizon.lm.model.rows_sharded`, active under the update's ``jax.set_mesh``) keeps each
layer's activations split by rows, so XLA gathers weights (FSDP) rather than whole-batch activations. On one
device every function here is the identity placement, so results equal the unsharded code; on several they
equal it to float32 summation order (tests/lm/test_lm_sharding.py states the tolerance).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import optax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from longhorizon.errors import UsageError
from longhorizon.lm.grpo import GRPOConfig, update
from longhorizon.lm.llama import LlamaConfig
from longhorizon.lm.model import BATCH_AXES, ModelConfig

AXES = ("data", "fsdp", "tensor")
# BATCH_AXES (data, fsdp): batch rows are split over both, FSDP devices also take their own rows
FSDP, TENSOR = "fsdp", "tensor"

# (module, parameter) -> spec of the parameter of one layer; a stacked leaf (Llama's ``blocks``, a leading layer
# axis) gets an unsplit layer dimension in front. Anything not named here is replicated.
RULES: dict[tuple[str, str], tuple] = {
    ("embed", "embedding"): (None, FSDP),  # [V, D]: the vocabulary is not split (259 in tiny-random: odd)
    ("pos_embed", "embedding"): (None, FSDP),  # [max_len, D]
    ("lm_head", "kernel"): (FSDP, None),  # [D, V]
    # Llama: q [D, H, hd], k, v [D, Hk, hd], o [H, hd, D]; SwiGLU gate, up [D, F], down [F, D]
    ("q", "kernel"): (FSDP, TENSOR, None),
    ("k", "kernel"): (FSDP, TENSOR, None),
    ("v", "kernel"): (FSDP, TENSOR, None),
    ("q", "bias"): (TENSOR, None),
    ("k", "bias"): (TENSOR, None),
    ("v", "bias"): (TENSOR, None),
    ("o", "kernel"): (TENSOR, None, FSDP),
    ("gate", "kernel"): (FSDP, TENSOR),
    ("up", "kernel"): (FSDP, TENSOR),
    ("down", "kernel"): (TENSOR, FSDP),
    # lm.model.Transformer: qkv [D, 3, H, hd], out [H, hd, D], up [D, F] (+ bias [F]), down [F, D]
    ("qkv", "kernel"): (FSDP, None, TENSOR, None),
    ("qkv", "bias"): (None, TENSOR, None),
    ("out", "kernel"): (TENSOR, None, FSDP),
    ("up", "bias"): (TENSOR,),
}


# ----------------------------------------------------------------------------- the mesh


def mesh_sizes(spec: str | Mapping[str, int]) -> dict[str, int]:
    """``{"data": D, "fsdp": F, "tensor": T}`` from ``"data=D,fsdp=F,tensor=T"`` (or a dict); missing axes are 1."""
    if isinstance(spec, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, eq, size = part.partition("=")
            if not eq or not size.strip().isdigit():
                raise UsageError(f"mesh {spec!r} is not a list of AXIS=SIZE pairs; write e.g. data=2,fsdp=2,tensor=1.")
            if name.strip() in pairs:
                raise UsageError(f"mesh {spec!r} names axis {name.strip()!r} twice; give each axis once.")
            pairs[name.strip()] = int(size)
        spec = pairs
    unknown = sorted(set(spec) - set(AXES))
    if unknown:
        raise UsageError(f"mesh axis {unknown[0]!r} is unknown; use data, fsdp and tensor, e.g. data=2,fsdp=2,tensor=1.")
    sizes = {axis: int(spec.get(axis, 1)) for axis in AXES}
    bad = [a for a, n in sizes.items() if n < 1]
    if bad:
        raise UsageError(f"mesh axis {bad[0]}={sizes[bad[0]]} must be a positive integer; use 1 or more.")
    return sizes


def model_dims(model_cfg) -> tuple[dict[str, int], dict[str, int]]:
    """``(split by tensor, split by fsdp)``: the model's dimensions each axis must divide (:data:`RULES`)."""
    if isinstance(model_cfg, LlamaConfig):
        tensor = {"query heads": model_cfg.n_heads, "key/value heads": model_cfg.n_kv_heads, "MLP width": model_cfg.d_ff}
    elif isinstance(model_cfg, ModelConfig):
        tensor = {"heads": model_cfg.n_heads, "MLP width": model_cfg.ff_dim}
    else:
        raise UsageError(f"{type(model_cfg).__name__} has no sharding rules; use a LlamaConfig or a ModelConfig.")
    return tensor, {"model width (d_model)": model_cfg.d_model}


def check_model(sizes: Mapping[str, int], model_cfg) -> None:
    """One sentence (UsageError) if ``tensor`` or ``fsdp`` does not divide the dimensions it splits."""
    for axis, dims in zip((TENSOR, FSDP), model_dims(model_cfg)):
        for what, n in dims.items():
            if n % sizes[axis]:
                fits = [k for k in range(1, n + 1) if all(m % k == 0 for m in dims.values())]
                raise UsageError(f"mesh {axis}={sizes[axis]} does not divide the model's {n} {what}; pick {axis} "
                                 f"from {fits}.")


def parse_mesh(spec: str | Mapping[str, int], model_cfg=None, devices=None) -> Mesh:
    """A ``Mesh`` with axes ``(data, fsdp, tensor)`` over ``devices`` (default: all of ``jax.devices()``).

    The axis sizes must multiply to the number of devices and, given ``model_cfg``, divide the model
    (:func:`check_model`); otherwise one sentence (UsageError) says what to change."""
    sizes = mesh_sizes(spec)
    devices = list(jax.devices() if devices is None else devices)
    total = math.prod(sizes.values())
    if total != len(devices):
        shown = ",".join(f"{a}={n}" for a, n in sizes.items())
        raise UsageError(f"mesh {shown} uses {total} devices but {len(devices)} are there; make the sizes multiply to "
                         f"{len(devices)}.")
    if model_cfg is not None:
        check_model(sizes, model_cfg)
    # Auto axes: XLA's partitioner propagates shardings through the unchanged model code
    return jax.make_mesh(tuple(sizes.values()), AXES, (AxisType.Auto,) * len(AXES), devices=devices)


# ----------------------------------------------------------------------------- partition specs


def _names(path) -> list[str]:
    return [str(getattr(k, "key", getattr(k, "name", k))) for k in path]


def param_spec(path, leaf) -> P:
    """The spec of one parameter (:data:`RULES` by its last two path names; replicated if unnamed)."""
    names = _names(path)
    rule = RULES.get(tuple(names[-2:])) if len(names) >= 2 else None
    if rule is None:
        return P()
    if leaf.ndim == len(rule) + 1:  # stacked layers: the layer axis is never split
        rule = (None, *rule)
    if leaf.ndim != len(rule):
        raise UsageError(f"parameter {'/'.join(names)} has shape {tuple(leaf.shape)}, which its sharding rule "
                         f"{rule} does not fit; the parameters do not belong to a supported model.")
    return P(*rule)


def param_specs(params):
    """A tree of ``PartitionSpec`` shaped like ``params`` (arrays or ``jax.ShapeDtypeStruct``)."""
    return jax.tree_util.tree_map_with_path(param_spec, params)


def _check_divides(mesh: Mesh, path, leaf, spec: P) -> None:
    for dim, axis in zip(leaf.shape, spec):
        if axis is not None and dim % mesh.shape[axis]:
            raise UsageError(f"parameter {'/'.join(_names(path))} of shape {tuple(leaf.shape)} does not split over "
                             f"{axis}={mesh.shape[axis]}; pick a mesh whose {axis} size divides it.")


def param_shardings(mesh: Mesh, params):
    """``NamedSharding`` per parameter (refused in one sentence where the mesh does not divide a dimension)."""

    def one(path, leaf):
        spec = param_spec(path, leaf)
        _check_divides(mesh, path, leaf, spec)
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(one, params)


def opt_state_shardings(mesh: Mesh, optimizer, params):
    """The optimiser state's shardings: every moment like its parameter, counters and the rest replicated."""
    state = jax.eval_shape(optimizer.init, params)
    return optax.tree_map_params(optimizer, lambda _, sharding: sharding, state, param_shardings(mesh, params),
                                 transform_non_params=lambda _: NamedSharding(mesh, P()))


def batch_sharding(mesh: Mesh, x) -> NamedSharding:
    """Rows (the leading axis) over ``data x fsdp``; an array whose rows do not split evenly (a handful of shared
    prompts) is replicated: the same result, only that array is not data-parallel."""
    rows = math.prod(mesh.shape[a] for a in BATCH_AXES)
    if not x.shape or x.shape[0] % rows:
        return NamedSharding(mesh, P())
    return NamedSharding(mesh, P(BATCH_AXES))


def shard_params(mesh: Mesh, params):
    """``params`` placed on the mesh (:func:`param_shardings`)."""
    return jax.device_put(params, param_shardings(mesh, params))


def shard_batch(mesh: Mesh, batch):
    """Every array of ``batch`` placed with its rows over ``data x fsdp`` (:func:`batch_sharding`)."""
    return jax.tree_util.tree_map(lambda x: _put(x, batch_sharding(mesh, x)), batch)


def _put(x, sharding: NamedSharding):
    """An array placed with ``sharding``; a ``jax.ShapeDtypeStruct`` (to compile without data) given it."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    return jax.device_put(x, sharding)


def device_bytes(tree, device=None) -> int:
    """Bytes of ``tree``'s arrays held by ``device`` (default: the first device holding any of them)."""
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array)]
    if device is None:
        device = min((s.device for x in leaves for s in x.addressable_shards), key=lambda d: d.id)
    return int(sum(s.data.nbytes for x in leaves for s in x.addressable_shards if s.device == device))


# ----------------------------------------------------------------------------- the sharded update


class ShardedUpdate:
    """An optimiser step on a mesh, with GRPOTrainer's ``updater`` interface (``init(params)``, ``to_store``,
    ``__call__(params, opt_state, batch)``): :func:`longhorizon.lm.grpo.update` by default, or any ``step(params,
    opt_state, batch) -> (params, opt_state, metrics)`` (``lm sft`` passes its teacher-forced step).

    Parameters and optimiser state are placed with :func:`param_shardings` / :func:`opt_state_shardings`
    (a no-op once they are), the batch with :func:`shard_batch`; the jitted update runs unchanged inside a jit
    whose ``out_shardings`` keep the new parameters and state where the old ones were (donated, so a step
    holds one copy). ``params`` only gives the shapes (``jax.ShapeDtypeStruct`` leaves will do). In a trainer the
    parameters move onto the mesh at the first step; generation then runs on the mesh too."""

    # a copy, as GRPOTrainer's own default: the step donates the parameters, and the reference must not share them
    to_store = staticmethod(jnp.array)

    def __init__(self, mesh: Mesh, params, *, optimizer, model_cfg=None, cfg: GRPOConfig | None = None, step=None):
        self.mesh, self.optimizer = mesh, optimizer
        shapes = jax.eval_shape(lambda p: p, params)
        self.param_shardings = param_shardings(mesh, shapes)
        self.opt_shardings = opt_state_shardings(mesh, optimizer, shapes)
        if step is None:
            step = functools.partial(update, model_cfg=model_cfg, cfg=cfg, optimizer=optimizer)
        self.step = jax.jit(step, out_shardings=(self.param_shardings, self.opt_shardings, NamedSharding(mesh, P())),
                            donate_argnums=(0, 1))
        self._copy = jax.jit(lambda tree: jax.tree_util.tree_map(jnp.copy, tree), out_shardings=self.param_shardings)

    def place(self, params):
        """A copy of ``params`` on the mesh. ``device_put`` would let a replicated copy share the caller's buffer
        on the first device (``may_alias=False`` notwithstanding), and the step donates its input, which would
        delete the caller's array: a jitted copy never shares."""
        return self._copy(params)

    def init(self, params):
        """The optimiser state of ``params``, created sharded (never whole on one device)."""
        return jax.jit(self.optimizer.init, out_shardings=self.opt_shardings)(self.place(params))

    def arguments(self, params, opt_state, batch):
        """The step's inputs on the mesh (arrays already placed are passed through as they are)."""
        put = functools.partial(jax.tree_util.tree_map, _put)
        return put(params, self.param_shardings), put(opt_state, self.opt_shardings), shard_batch(self.mesh, batch)

    def __call__(self, params, opt_state, batch):
        with jax.set_mesh(self.mesh):  # the model keeps activations split by rows (lm.model.rows_sharded)
            return self.step(*self.arguments(params, opt_state, batch))

    def compile(self, params, opt_state, batch):
        """The step compiled for these inputs' shapes: call it on :meth:`arguments`; its ``memory_analysis()`` gives
        the per-device bytes of its arguments, outputs (the new parameters and optimiser state) and temporaries.
        Leaves may be ``jax.ShapeDtypeStruct`` (``opt_state = jax.eval_shape(optimizer.init, params)``), so a large
        model's per-device memory is read without allocating it."""
        with jax.set_mesh(self.mesh):
            return self.step.lower(*self.arguments(params, opt_state, batch)).compile()
