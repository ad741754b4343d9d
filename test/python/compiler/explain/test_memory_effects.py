"""Lowered.memory_estimate() against XLA:CPU's Compiled.memory_analysis(), one program
per effect of XLA's buffer assignment the model reproduces, none of them a program the
rules were read off: each must land within 10% of XLA's net bytes (arguments + outputs
+ temporaries - aliased), and its temporaries within 25%."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import shardc.compiler as sc
from shardc.compiler.explain import memory
from shardc.compiler.explain.heap import heap_bytes
from shardc.compiler.explain.liveness import Interval


def _mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


def _compare(fun, args, in_shardings, donate=()):
    lowered = sc.jit(fun, in_shardings=in_shardings, donate_argnums=donate).lower(*args)
    estimate = lowered.memory_estimate()
    stats = lowered.compile().memory_analysis()
    xla_net = (stats.argument_size_in_bytes + stats.output_size_in_bytes
               + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    assert estimate.argument_bytes == stats.argument_size_in_bytes
    assert estimate.output_bytes == stats.output_size_in_bytes
    return estimate, stats, xla_net


def _assert_close(estimate, stats, xla_net):
    figures = (estimate.net_bytes, xla_net, estimate.temp_bytes, stats.temp_size_in_bytes)
    assert abs(estimate.net_bytes / xla_net - 1) <= 0.10, figures
    assert abs(estimate.temp_bytes / stats.temp_size_in_bytes - 1) <= 0.25, figures


def test_many_small_buffers_take_the_heap_alignment():
    # Tiny dot results all live until the end: a few floats each, and XLA:CPU's heap
    # gives each a 64-byte aligned slot (counted at 24 bytes, the estimate was 40%).
    def f(a, ys):
        parts = [jnp.tanh(a @ y) for y in ys]
        return sum(p * k for k, p in enumerate(parts)), jnp.stack(parts[::-1])

    mesh = _mesh()
    ys = [jnp.full((6,), float(k)) for k in range(12)]
    shardings = (NamedSharding(mesh, P()), [NamedSharding(mesh, P())] * len(ys))
    _assert_close(*_compare(f, (jnp.eye(6), ys), shardings))


def test_heap_packs_like_xla_best_fit():
    # Three 64-byte buffers live one after another share one slot; a long-lived one
    # beside them takes a second: the heap is two slots, not the sum.
    assert heap_bytes([(0, 9, 64), (0, 2, 64), (3, 5, 64), (6, 9, 64)], 64) == 128
    # Sizes round up to the alignment; nothing live, no heap.
    assert heap_bytes([(0, 0, 4), (1, 1, 4)], 64) == 64
    assert heap_bytes([], 64) == 0


@pytest.mark.parametrize("square", [jnp.square, lambda x: x * x], ids=["chlo", "multiply"])
def test_square_fuses_like_a_multiply(square):
    # jnp.square lowers to chlo.square: elementwise, fused into its readers like x * x.
    def f(x):
        return jnp.sum(square(jnp.sin(x)), axis=0) + jnp.max(square(jnp.cos(x)), axis=0)

    x = jnp.ones((256, 256))
    estimate = sc.jit(f).lower(x).memory_estimate()
    stats = jax.jit(f).lower(x).compile().memory_analysis()
    assert estimate.temp_bytes <= stats.temp_size_in_bytes + 64 * 4


def _rms(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _residual_step(dtype, d=128, tokens=(32, 16)):
    """A residual stack of three RMS-normed MLP blocks and its SGD step, weights
    sharded over ``model``, data over ``data``."""
    def block(x, layer):
        scale, w1, w2 = layer
        return x + jax.nn.gelu(_rms(x, scale) @ w1) @ w2

    def loss(params, x):
        for layer in zip(*params):
            x = block(x, layer)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda p, g: (p - 0.1 * g).astype(p.dtype), params, grads)

    mesh = _mesh()
    hidden, n = 2 * d, 3
    params = (jnp.ones((n, d), dtype), jnp.full((n, d, hidden), 0.01, dtype),
              jnp.full((n, hidden, d), 0.01, dtype))
    specs = (NamedSharding(mesh, P()), NamedSharding(mesh, P(None, None, "model")),
             NamedSharding(mesh, P(None, "model", None)))
    x = jnp.ones((*tokens, d), dtype)
    return step, (params, x), (specs, NamedSharding(mesh, P("data")))


@pytest.mark.parametrize("tokens", [(32, 16), (4, 4)], ids=["ynn", "loop"])
def test_residual_stream_read_by_a_large_norm_is_a_buffer(tokens):
    # XLA:CPU hands an f32 sum of at least 4096 elements per device to YNNPACK: the
    # residual stream the RMS norm's x * x reads (and the next residual add), and the
    # normalised x * rsqrt, stay buffers (fused everywhere, the estimate was 25% low).
    # A smaller norm is a loop fusion recomputing them: no buffer of their own.
    step, args, shardings = _residual_step(jnp.float32, tokens=tokens)
    _assert_close(*_compare(step, args, shardings))


def test_bf16_dots_computed_in_f32_on_cpu():
    # XLA:CPU converts bf16 dot operands to f32 buffers (the weights once, for the
    # forward and the backward) and writes the results in f32 before rounding them:
    # counting them at bf16 put the estimate's temporaries at half XLA's.
    step, args, shardings = _residual_step(jnp.bfloat16)
    _assert_close(*_compare(step, args, shardings))


def test_all_reduce_writes_a_buffer_apart_from_its_operand():
    # A donated step: the outputs alias the arguments, so the gradients' all-reduce
    # (partial sums over data) has no free output to write into; it writes a buffer
    # of its own while its operand is still live (the estimate was 20% low).
    def step(w, b, x):
        def loss(w, b):
            return jnp.sum(jnp.tanh(x @ w + b) ** 2)
        gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
        return w - 0.1 * gw, b - 0.1 * gb

    mesh = _mesh()
    shardings = (NamedSharding(mesh, P()), NamedSharding(mesh, P()),
                 NamedSharding(mesh, P("data")))
    args = (jnp.full((64, 64), 0.01), jnp.zeros((64,)), jnp.ones((64, 64)))
    _assert_close(*_compare(step, args, shardings, donate=(0, 1)))


def _residual_mlp_loss(params, x):
    h = x
    for w_in, w_out in params:
        h = h + jax.nn.relu(h @ w_in) @ w_out
    return jnp.mean(h ** 2)


def test_gradients_summed_as_reduced_are_all_reduced_one_by_one():
    # FSDP weights (data x model) clipped by their global norm: XLA:CPU's combiner
    # walks the step in post order, where each gradient's sum of squares (over
    # model, then data) follows its gradient's all-reduce over data and depends on
    # it, so no two gradients are combined (all-reduce.16 and .18: a sum and one
    # gradient each). Combining all four where the last is computed kept every
    # gradient's partial sums live through the backward: 1.42x XLA's bytes.
    def step(params, x):
        grads = jax.grad(_residual_mlp_loss)(params, x)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
        scale = jnp.minimum(1.0, 1.0 / norm)
        return jax.tree.map(lambda w, g: w - 0.1 * scale * g, params, grads)

    mesh = _mesh()
    weights = NamedSharding(mesh, P("data", "model"))
    params = [(jnp.full((64, 128), 0.01), jnp.full((128, 64), 0.01)) for _ in range(2)]
    shardings = ([(weights, weights)] * 2, NamedSharding(mesh, P("data")))
    _assert_close(*_compare(step, (params, jnp.ones((16, 64))), shardings))


def test_all_reduces_of_other_reductions_neither_join_nor_break_a_group():
    # FSDP gradients (over data) checked for finiteness before the update: each
    # check's all-reduce (an ``and`` of pred) follows its gradient's in post order
    # and depends on it, but XLA's combiner keys all-reduces by reduction and
    # element type too, so the gradients' sums are combined all the same (the
    # checks closing the gradients' group put the estimate at 0.67x XLA's).
    def step(params, x):
        grads = jax.grad(_residual_mlp_loss)(params, x)
        finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
        return jax.tree.map(lambda w, g: jnp.where(finite, w - 0.1 * g, w), params, grads)

    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    rows = NamedSharding(mesh, P("data"))
    params = [(jnp.full((64, 128), 0.01), jnp.full((128, 64), 0.01)) for _ in range(2)]
    _assert_close(*_compare(step, (params, jnp.ones((16, 64))), ([(rows, rows)] * 2, rows)))


def test_bf16_dot_converts_its_gathered_operand_on_cpu():
    # FSDP: bf16 weights sharded over data are gathered for the dots, forward and
    # backward. XLA:CPU converts the gathered weight to f32 once (a copy of the
    # gathered shape, kept for both dots) and frees the gathered buffer: the wide
    # copy at the shard's shape beside a long-lived narrow gathered one put the
    # estimate 17% low.
    def step(w1, w2, x):
        def loss(w1, w2):
            return jnp.mean((jnp.tanh(x @ w1) @ w2).astype(jnp.float32) ** 2)
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
        return w1 - (0.1 * g1).astype(w1.dtype), w2 - (0.1 * g2).astype(w2.dtype)

    mesh = _mesh()
    d, hidden = 256, 512
    args = (jnp.full((d, hidden), 0.01, jnp.bfloat16), jnp.full((hidden, d), 0.01, jnp.bfloat16),
            jnp.ones((64, d), jnp.bfloat16))
    shardings = (NamedSharding(mesh, P("data", "model")), NamedSharding(mesh, P("model", "data")),
                 NamedSharding(mesh, P("data")))
    _assert_close(*_compare(step, args, shardings))


def test_weight_cast_for_bf16_dots_is_computed_in_their_wide_copy():
    # A mixed-precision policy casts an f32 weight to bf16 for its dots; XLA:CPU
    # computes those dots in f32 and fuses the cast into the convert writing the
    # f32 copy they read (convert_convert_fusion): no bf16 weight. Counting it put
    # the temporaries at 1.46x XLA's.
    def f(w, x, y):
        wb = w.astype(jnp.bfloat16)
        return jnp.tanh(x @ wb) + jnp.tanh(y @ wb)

    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    rows, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    args = (jnp.ones((256, 256)), jnp.ones((64, 256), jnp.bfloat16),
            jnp.ones((64, 256), jnp.bfloat16))
    _assert_close(*_compare(f, args, (whole, rows, rows)))


def test_conv_output_gradient_is_computed_in_its_readers():
    # A conv layer with a bias: its output gradient (2 * (out - y), two large
    # operands) is read by the kernel gradient's convolution, through the transposed
    # copy XLA:CPU makes of it, and by the bias gradient's sum. Every reader can fuse
    # it, so XLA computes it in both (transpose_copy_fusion, add_reduce_fusion): no
    # buffer of its own (counting one put the estimate at 1.18x).
    def step(k, b, x, y):
        def loss(k, b):
            out = jax.lax.conv_general_dilated(
                x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
            return jnp.sum((out - y) ** 2)
        gk, gb = jax.grad(loss, argnums=(0, 1))(k, b)
        return k - 0.1 * gk, b - 0.1 * gb

    mesh = _mesh()
    whole, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    args = (jnp.ones((3, 3, 8, 8)), jnp.zeros((8,)), jnp.ones((16, 8, 8, 8)),
            jnp.ones((16, 8, 8, 8)))
    _assert_close(*_compare(step, args, (whole, whole, rows, rows)))


def test_all_reduce_runs_between_its_op_and_the_next():
    # Pooled attention, heads sharded over model, batch over data: the backward's
    # model-axis all-reduce of the keys' gradient runs as an op of its own between
    # the dot and the transposed copy that reads its result, and the combined
    # data-axis all-reduce of the gradients after the last dot. Counting each
    # all-reduce's result at the next op, beside that op's own result, put the
    # temporaries at 1.75x XLA's.
    def step(params, tokens, labels):
        def loss(p):
            keys = tokens @ p["keys"]
            att = jax.nn.softmax(jnp.einsum("hd,bsd->bhs", p["queries"], keys), -1)
            pooled = jnp.einsum("bhs,bsd->bhd", att, tokens)
            logits = jnp.einsum("bhd,hdc->bc", pooled, p["out"])
            picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1)
            return -jnp.mean(picked)
        return jax.value_and_grad(loss)(params)

    mesh = _mesh()
    params = {"keys": jnp.full((64, 64), 0.01), "queries": jnp.full((4, 64), 0.01),
              "out": jnp.full((4, 64, 8), 0.01)}
    shardings = ({"keys": NamedSharding(mesh, P()), "queries": NamedSharding(mesh, P("model")),
                  "out": NamedSharding(mesh, P("model"))},
                 NamedSharding(mesh, P("data")), NamedSharding(mesh, P("data")))
    args = (params, jnp.ones((8, 32, 64)), jnp.zeros((8,), jnp.int32))
    _assert_close(*_compare(step, args, shardings))


def test_a_loop_bodys_buffers_pack_in_the_loops_place():
    # XLA's heap simulator runs over the program flattened, a loop's body in the
    # loop's place: a body's buffers are each placed beside the block's buffers live
    # across the loop, and the body's own gaps stay gaps (the llama-shaped bf16
    # rematerialised step at 256 devices: 0.92x of XLA's net with the body's peak
    # as one block, 0.99x flattened).
    outer = Interval(0, 3, 64, None)  # live across the loop at position 2
    first = Interval(2, 2, 128, None, within=((0, -1), (1, 1 << 62)))
    second = Interval(2, 2, 64, None, within=((2, -1), (3, 1 << 62)))
    flat, positions = memory._flattened([outer, first, second])
    assert [(iv.start, iv.end) for iv in flat] == [(0, 5), (1, 2), (3, 4)]
    assert positions == [0, 2, 2, 2, 2, 3]
    # the body's two buffers share bytes: one after the other, beside the outer one
    assert heap_bytes([(iv.start, iv.end, iv.size) for iv in flat], 64) == 192


def test_sort_writes_over_its_dying_operand():
    # XLA's dataflow lets a sort of one operand write its result in the buffer of
    # an operand it is the only reader of (each scaled copy's buffer here): counted
    # apart, each sort added a buffer of its operand's size.
    def f(x):
        return sum(x * jnp.sort(x * k + 1.0, axis=1)[:, k:k + 1] for k in range(6))

    mesh = _mesh()
    shardings = (NamedSharding(mesh, P("data")),)
    estimate, stats, xla_net = _compare(f, (jnp.ones((256, 64)),), shardings)
    assert estimate.temp_bytes <= stats.temp_size_in_bytes * 1.05, \
        (estimate.temp_bytes, stats.temp_size_in_bytes)
    _assert_close(estimate, stats, xla_net)


def test_a_cases_branches_compute_in_an_outputs_buffer():
    # XLA's live ranges run a conditional's branches one after the other in its
    # place, and the buffer assigner places each branch's values as it places the
    # block's: a branch's product, dead before the outputs are written after the
    # switch, in an output's allocation, the three branches' in the same one (XLA's
    # temp 464 bytes: the branch's results' table and the small sums). As one block
    # beside the outputs, the branches' peak was temp (1.49x XLA's net); with each
    # branch's buffers live at the switch's one position, one output held one of them
    # (1.25x).
    def f(w, x, i):
        s = jax.lax.switch(i, [lambda x: jnp.tanh(x @ w).sum(0),
                               lambda x: (jnp.exp(x @ w.T) * 2).max(0),
                               lambda x: jnp.sin(x @ (w * w)).min(0)], x)
        return jnp.cos(w) * s, jnp.sin(w) + s

    replicated = NamedSharding(_mesh(), P())
    args = (jnp.ones((64, 64)), jnp.ones((64, 64)), jnp.int32(1))
    _assert_close(*_compare(f, args, (replicated,) * 3))


def test_an_output_of_the_arguments_alone_is_written_first():
    # XLA's scheduler runs an op reading only arguments first: its output's
    # allocation holds nothing before, and a branch's product after it goes to the
    # heap (XLA's temp 16580 bytes: the 16 KiB product of one branch). Taken as
    # written where the program computes it, after the switch, the output held the
    # branches' products (0.80x XLA's net).
    def f(w, x, i):
        return jax.lax.switch(i, [lambda x: jnp.tanh(x @ w) @ w,
                                  lambda x: jnp.exp(x @ w.T) @ w], x), jnp.sin(w)

    replicated = NamedSharding(_mesh(), P())
    args = (jnp.ones((64, 64)) * 0.01, jnp.ones((64, 64)), jnp.int32(1))
    _assert_close(*_compare(f, args, (replicated,) * 3))


def test_a_branchs_reduced_result_leaves_its_partial_sums_a_plain_buffer():
    # A switch branch's weight gradient and scale gradient are partial sums XLA
    # reduces in one combined all-reduce, whose results are the conditional's own:
    # the partial sums are buffers as any other, placed in an output's allocation
    # written after the switch. Kept in the heap as a combined all-reduce's results
    # are in the entry, the estimate's temporaries were 1.51x XLA's (net 1.13x).
    def loss(w_in, w_out, scale, x, i):
        h = jnp.tanh(x @ w_in)
        out = jax.lax.switch(i, [lambda h: h @ w_out, lambda h: jnp.sin(h * scale) @ w_out,
                                 lambda h: (h * h) @ w_out], h)
        return jnp.mean((out - x) ** 2)

    mesh = _mesh()
    shardings = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)),
                 NamedSharding(mesh, P("model")), NamedSharding(mesh, P("data")),
                 NamedSharding(mesh, P()))
    args = (jnp.ones((64, 128)) * 0.01, jnp.ones((128, 64)) * 0.01, jnp.ones((128,)),
            jnp.ones((64, 64)), jnp.int32(1))
    _assert_close(*_compare(jax.value_and_grad(loss, argnums=(0, 1, 2)), args, shardings))
