"""Training beyond device memory: the GRPO update streamed layer by layer from host memory (Horizon-LM).

Horizon-LM ("a RAM-centric architecture for LLM training") keeps parameters and optimiser state in
host memory as the authority and uses the accelerator as a transient compute engine: each layer's
weights travel to the device when that layer runs, the next layer's transfer is issued before the
current layer computes (double buffering), activations are recomputed layer by layer in the
backward pass, and the optimiser step runs on the host. For a Llama with parts
``embed, blocks (layers 0 .. L-1, stacked), head = (norm, lm_head or the tied embedding)`` and one optimiser
batch of ``M`` micro-batches, :class:`LayerStreamedUpdate` computes::

    for each micro-batch m:
        x_0 = Embed(W_embed; tokens)                              [B, T, d]
        for l = 0 .. L-1:                                         forward, nothing kept on the device
            put W_{l+1}                                           (issued before layer l computes)
            save x_l to the host;  x_{l+1} = Block(W_l; x_l)
        (loss_m, g_head, g_{x_L}) = value_and_grad(GRPO loss of Head(W_head; x_L))
        for l = L-1 .. 0:                                         backward, one layer recomputed at a time
            put W_{l-1}, x_{l-1}                                  (issued before layer l's pullback)
            (g_{W_l}, g_{x_l}) = vjp(Block, W_l, x_l)(g_{x_{l+1}})   G_l += g_{W_l}  on the host
        G_embed += vjp(Embed, W_embed)(g_{x_0})                   (+ the head's share when tied)
    n = sqrt(sum_parts ||G_p||^2)                                 the global norm, from per-part squares
    c = 1 if n < max_grad_norm else max_grad_norm / n             optax.clip_by_global_norm
    for each part p:  (W_p, S_p) = AdamW(c G_p; S_p, W_p)         a small jitted step on the host device

Clipping needs the global norm before any part's step, so this is one pass that keeps every part's
gradient on the host until the last is known (host memory holds one model-sized gradient), then
steps part by part. The loss is :func:`longhorizon.lm.grpo.completion_loss` on the scores of
:func:`longhorizon.lm.grpo.completion_stream` (both layouts: shared prompts or one prompt per row),
the optimiser AdamW after global-norm clipping as in :func:`longhorizon.lm.grpo.rl_optimizer`, so
one step equals :func:`longhorizon.lm.grpo.update` to float32 rounding (tests/lm/test_offload.py).

Device memory holds at most two parts' weights (the running one and the prefetched one), the
running layer's input, output and recomputed activations, the residual gradient and the batch;
the plain update holds the whole model, its optimiser state and every layer's activations. One
block function is compiled once and serves every layer (all blocks have the same shapes).
Generation and the reference log-probabilities (``beta > 0``) still run the whole model.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import UsageError
from longhorizon.lm.grpo import GRPOConfig, completion_loss, completion_stream, update_metrics
from longhorizon.lm.llama import Block, LlamaConfig, RMSNorm, layer
from longhorizon.lm.model import causal_slot_mask

# ----------------------------------------------------------------------------- the Llama, one part at a time
# The same modules, in the same order, as longhorizon.lm.llama.Llama (tests compare with llama.forward).


def _embedding(cfg: LlamaConfig) -> nn.Embed:
    return nn.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.dtype, param_dtype=cfg.dtype)


def embed_forward(embed_params, batch, *, cfg: LlamaConfig, temperature: float) -> jax.Array:
    """``x_0 = E[tokens]``: ``[1 or B, T, d]`` for the token stream of :func:`completion_stream`."""
    stream = completion_stream(batch, temperature)
    return _embedding(cfg).apply({"params": embed_params}, stream.tokens)


def block_forward(block_params, x, batch, *, cfg: LlamaConfig, temperature: float) -> jax.Array:
    """``x_{l+1} = Block(W_l; x_l)`` (``[.., T, d] -> [.., T, d]``), with the batch's positions and attention."""
    stream = completion_stream(batch, temperature)
    mask = None if stream.attend is not None else causal_slot_mask(x.shape[1], stream.kv_valid, None, 0)
    y, _ = Block(cfg).apply({"params": block_params}, x, stream.positions, mask, None, 0, stream.attend)
    return y


def head_loss(head_params, x, batch, total_tokens, *, cfg: LlamaConfig, grpo: GRPOConfig, n_micro: int):
    """``(loss, sums)`` of one micro-batch from the last residual stream ``x_L``: final RMSNorm, output
    head (the tied embedding or ``lm_head``), scores, :func:`longhorizon.lm.grpo.completion_loss`."""
    stream = completion_stream(batch, grpo.temperature)
    h = RMSNorm(cfg.rms_eps, cfg.dtype).apply({"params": head_params["norm"]},
                                              x if stream.logits_at is None else x[:, stream.logits_at])
    if cfg.tie_embeddings:
        logits = _embedding(cfg).apply({"params": head_params["embed"]}, h, method="attend")
    else:
        dense = nn.Dense(cfg.vocab_size, use_bias=False, dtype=cfg.dtype, param_dtype=cfg.dtype)
        logits = dense.apply({"params": head_params["lm_head"]}, h)
    logp, entropy = stream.scores(logits.astype(jnp.float32))
    return completion_loss(logp, entropy, batch, total_tokens, cfg=grpo, n_micro=n_micro)


# ----------------------------------------------------------------------------- compiled pieces (once per shape)

_STATIC = ("cfg", "temperature")
_embed_forward = jax.jit(embed_forward, static_argnames=_STATIC)
_block_forward = jax.jit(block_forward, static_argnames=_STATIC)


@functools.partial(jax.jit, static_argnames=_STATIC, donate_argnums=(0,))
def _block_pullback(block_params, x, g_y, batch, *, cfg, temperature):
    """``(g_W, g_x)`` of one block at ``(W, x)`` for the output cotangent ``g_y``, its forward recomputed
    (``W``'s device copy is donated: ``g_W`` has its shapes and takes its buffers)."""
    _, pullback = jax.vjp(lambda w, h: block_forward(w, h, batch, cfg=cfg, temperature=temperature), block_params, x)
    return pullback(g_y)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _embed_pullback(embed_params, g_x, batch, *, cfg, temperature):
    _, pullback = jax.vjp(lambda w: embed_forward(w, batch, cfg=cfg, temperature=temperature), embed_params)
    return pullback(g_x)[0]


@functools.partial(jax.jit, static_argnames=("cfg", "grpo", "n_micro"))
def _head_grads(head_params, x, batch, total_tokens, *, cfg, grpo, n_micro):
    """``((loss, sums), (g_head, g_x))``."""
    return jax.value_and_grad(head_loss, argnums=(0, 1), has_aux=True)(head_params, x, batch, total_tokens, cfg=cfg,
                                                                        grpo=grpo, n_micro=n_micro)


@functools.partial(jax.jit, static_argnames=("optimizer",))
def _part_step(params, opt_state, grads, clip, *, optimizer):
    """One part's AdamW step on its gradient scaled by the global clipping factor ``clip``."""
    updates, opt_state = optimizer.update(jax.tree_util.tree_map(lambda g: g * clip.astype(g.dtype), grads),
                                          opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def _to_host(tree):
    """A host copy of device results (on a CPU device a view would keep the device buffer alive under another name)."""
    return jax.tree_util.tree_map(np.array, jax.device_get(tree))


def _on_host(tree):
    """Host arrays as they are (no copy); arrays of the host device (a restored checkpoint, a step's result) as numpy."""
    return jax.tree_util.tree_map(np.asarray, tree)


def _accumulate(total, tree):
    return tree if total is None else jax.tree_util.tree_map(np.add, total, tree)


def device_bytes(device) -> int:
    """Bytes of every live JAX array on ``device`` (what the program holds there now)."""
    return sum(a.nbytes for a in jax.live_arrays() if device in a.devices())


class LayerStreamedUpdate:
    """The GRPO optimiser step of :func:`longhorizon.lm.grpo.update`, layer-streamed from host memory
    (module docstring); a drop-in ``updater`` of :class:`longhorizon.lm.grpo.GRPOTrainer`.

    ``device`` computes (default: the first device), ``host`` runs the optimiser step (default: the
    CPU device; on a CPU-only machine they are the same chip, and the numpy arrays are the host
    memory). With ``probe=True`` every layer waits for its result and ``peak_device_bytes`` records
    the largest :func:`device_bytes` seen above what was live before the step (a measurement mode:
    it removes the overlap).
    """

    def __init__(self, model_cfg, cfg: GRPOConfig, *, device=None, host=None, probe: bool = False):
        if not isinstance(model_cfg, LlamaConfig):
            raise UsageError(f"--offload host streams Llama-family models layer by layer, not a "
                             f"{type(model_cfg).__name__} policy; start from a pretrained --model or use --offload none.")
        self.model_cfg, self.cfg = model_cfg, cfg
        self.device = device or jax.devices()[0]
        self.host = host or jax.devices("cpu")[0]
        self.optimizer = optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.layers = range(model_cfg.n_layers)
        self.head = ("norm", "embed" if model_cfg.tie_embeddings else "lm_head")
        self.probe, self.peak_device_bytes, self._baseline = probe, 0, 0

    @staticmethod
    def to_store(x) -> np.ndarray:
        """Parameters live in host memory (a numpy copy), the authority the device streams from."""
        return np.array(x)

    def init(self, params) -> dict:
        """AdamW state per part (``embed``, ``blocks``, ``norm``, ``lm_head``), in host memory."""
        with jax.default_device(self.host):
            return {name: _to_host(self.optimizer.init(part)) for name, part in params.items()}

    # -- streaming -------------------------------------------------------------------
    def _put(self, tree):
        return jax.device_put(tree, self.device)

    def _streamed(self, trees):
        """Yield each tree on the device; the next one's transfer is issued before the current one is used."""
        trees = iter(trees)
        upcoming = next(trees, None)
        upcoming = None if upcoming is None else self._put(upcoming)
        while upcoming is not None:
            current, following = upcoming, next(trees, None)
            upcoming = None if following is None else self._put(following)
            yield current

    def _measure(self, *results):
        if self.probe:
            jax.block_until_ready(results)
            self.peak_device_bytes = max(self.peak_device_bytes, device_bytes(self.device) - self._baseline)

    # -- one micro-batch -------------------------------------------------------------------
    def _micro_grads(self, params, batch, total_tokens, n_micro: int, grads: dict):
        """Add one micro-batch's gradients to ``grads`` (host, per part); return its ``(loss, sums)``."""
        static = {"cfg": self.model_cfg, "temperature": self.cfg.temperature}
        x = _embed_forward(self._put(params["embed"]), batch, **static)
        inputs = []
        for weights in self._streamed(layer(params, i) for i in self.layers):  # host views of the stacked weights
            inputs.append(np.array(x))  # each layer's input waits on the host for the backward pass
            x = _block_forward(weights, x, batch, **static)
            self._measure(x)
        head = {name: params[name] for name in self.head}
        (loss, sums), (g_head, g_x) = _head_grads(self._put(head), x, batch, total_tokens, cfg=self.model_cfg,
                                                  grpo=self.cfg, n_micro=n_micro)
        self._measure(g_head, g_x)
        for name in self.head:
            grads[name] = _accumulate(grads.get(name), _to_host(g_head[name]))
        del g_head, x  # on the host now, or no longer needed: the device keeps only g_x
        if "blocks" not in grads:
            grads["blocks"] = jax.tree_util.tree_map(np.zeros_like, params["blocks"])
        backward = zip(reversed(self.layers), self._streamed((layer(params, i), x_in) for i, x_in in
                                                              zip(reversed(self.layers), reversed(inputs))))
        for i, (weights, x_in) in backward:
            g_w, g_x = _block_pullback(weights, x_in, g_x, batch, **static)
            self._measure(g_w, g_x)
            jax.tree_util.tree_map(lambda total, g: np.add(total[i], g, out=total[i]), grads["blocks"], _to_host(g_w))
        g_embed = _embed_pullback(self._put(params["embed"]), g_x, batch, **static)
        grads["embed"] = _accumulate(grads.get("embed"), _to_host(g_embed))
        return loss, sums

    # -- one optimiser step -------------------------------------------------------------------
    def gradients(self, params, batch):
        """``(grads, loss, sums)``: the gradient of the optimiser batch's loss (summed over its
        micro-batches, its consecutive slices as in :func:`longhorizon.lm.grpo.update`), on the host."""
        n_micro = self.cfg.gradient_accumulation_steps
        self._baseline = device_bytes(self.device) if self.probe else 0
        batch = self._put(batch)
        total_tokens = batch["mask"].sum()
        grads, loss, sums = {}, 0.0, None
        for m in range(n_micro):  # each array split along its own leading axis (prompts: G, completions: G*S)
            micro = {k: v[m * (len(v) // n_micro) : (m + 1) * (len(v) // n_micro)] for k, v in batch.items()}
            micro_loss, micro_sums = self._micro_grads(params, micro, total_tokens, n_micro, grads)
            loss, sums = loss + micro_loss, _accumulate(sums, _to_host(micro_sums))
        return grads, loss, sums

    def __call__(self, params, opt_state, batch):
        """``(params, opt_state, metrics)`` after one optimiser step on ``batch``, as :func:`longhorizon.lm.grpo.update`."""
        params, opt_state = _on_host(params), _on_host(opt_state)
        grads, loss, sums = self.gradients(params, batch)
        norm = np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in jax.tree_util.tree_leaves(grads)))
        clip = np.float32(1.0 if norm < self.cfg.max_grad_norm else self.cfg.max_grad_norm / norm)
        with jax.default_device(self.host):
            for name in params:
                stepped = _part_step(params[name], opt_state[name], grads[name], clip, optimizer=self.optimizer)
                params[name], opt_state[name] = _on_host(stepped)
        return params, opt_state, update_metrics(sums, loss, np.float32(norm))


# ----------------------------------------------------------------------------- device memory, from the compiled programs


def compiled_footprint(compiled) -> int:
    """Device bytes XLA's buffer assignment gives a compiled program: arguments + outputs not aliased to donated
    arguments + temporaries."""
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes)


def device_memory(model_cfg: LlamaConfig, cfg: GRPOConfig, batch) -> dict:
    """Device bytes of one GRPO optimiser step (one micro-batch) of ``model_cfg`` on ``batch`` (arrays or
    ``jax.ShapeDtypeStruct`` leaves: nothing is allocated), read from the compiled programs:

    * ``resident``: :func:`longhorizon.lm.grpo.update`, the whole model, AdamW state and activations on the device;
    * ``streamed``: :class:`LayerStreamedUpdate`'s high-water mark, the largest of its programs (embedding, block
      forward, head gradients, block pullback, embedding pullback) plus what waits beside it (the prefetched
      block's weights and input); ``pieces`` gives each program's footprint.
    """
    from longhorizon.lm import llama
    from longhorizon.lm.grpo import optimizer_for, update

    if cfg.gradient_accumulation_steps != 1:
        raise UsageError("device_memory measures one micro-batch; set gradient_accumulation_steps=1.")
    params = jax.eval_shape(lambda: llama.init_params(jax.random.PRNGKey(0), model_cfg))
    optimizer = optimizer_for(cfg)
    opt_state = jax.eval_shape(optimizer.init, params)
    batch = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), batch)
    resident = compiled_footprint(update.lower(params, opt_state, batch, model_cfg=model_cfg, cfg=cfg,
                                               optimizer=optimizer).compile())
    static = {"cfg": model_cfg, "temperature": cfg.temperature}
    block = jax.eval_shape(lambda p: layer(p, 0), params)
    embed = params["embed"]
    head = {name: params[name] for name in ("norm", "embed" if model_cfg.tie_embeddings else "lm_head")}
    x = jax.eval_shape(functools.partial(embed_forward, **static), embed, batch)
    total = jax.ShapeDtypeStruct((), jnp.float32)
    pieces = {
        "embed_forward": _embed_forward.lower(embed, batch, **static),
        "block_forward": _block_forward.lower(block, x, batch, **static),
        "head_gradients": _head_grads.lower(head, x, batch, total, cfg=model_cfg, grpo=cfg, n_micro=1),
        "block_pullback": _block_pullback.lower(block, x, x, batch, **static),
        "embed_pullback": _embed_pullback.lower(embed, x, batch, **static),
    }
    pieces = {name: compiled_footprint(lowered.compile()) for name, lowered in pieces.items()}

    def nbytes(tree):
        return int(sum(np.prod(a.shape) * np.dtype(a.dtype).itemsize for a in jax.tree_util.tree_leaves(tree)))

    waiting = nbytes(block) + nbytes(x)  # the next block's weights and input, put before the current one runs
    return {"resident": resident, "streamed": max(pieces.values()) + waiting, "pieces": pieces,
            "prefetched": waiting, "parameters": int(sum(np.prod(a.shape) for a in jax.tree_util.tree_leaves(params)))}
