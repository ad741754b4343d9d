"""AUTO on convolutions: kernel roles and image layouts read from the dimension numbers."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardc.compiler import AUTO, jit
from shardc.compiler.auto import modelled_step
from shardc.compiler.auto.activations import Constrained, anchors, open_marks
from shardc.compiler.auto.candidates import (
    activation_candidates,
    activation_seed,
    candidates,
    convolution_result,
    model_width,
    structured_seeds,
    weight_roles,
    window_dims,
)
from shardc.compiler.auto.evaluate import Evaluator
from shardc.compiler.cost.platforms import hardware


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _loss(kernel, head, images, labels, layout):
    """A strided convolution (NCHW/OIHW, or NHWC/HWIO), ReLU, global pooling, a head."""
    lhs, rhs = layout
    x = jax.lax.conv_general_dilated(images, kernel, (2, 2), "SAME",
                                     dimension_numbers=(lhs, rhs, lhs))
    pooled = jax.nn.relu(x).mean(axis=(lhs.index("H"), lhs.index("W")))
    logits = pooled @ head
    return -jax.numpy.mean(jax.nn.log_softmax(logits)[np.arange(labels.shape[0]), labels])


def _step(layout):
    def step(kernel, head, images, labels):
        loss, grads = jax.value_and_grad(_loss, argnums=(0, 1))(kernel, head, images, labels,
                                                                 layout)
        return kernel - 0.1 * grads[0], head - 0.1 * grads[1], loss
    return step


def _args(layout, channels=16, features=32, image=8, batch=8):
    lhs, rhs = layout
    rng = np.random.default_rng(0)
    sizes = {"N": batch, "C": channels, "H": image, "W": image}
    kernel_sizes = {"O": features, "I": channels, "H": 3, "W": 3}
    return (rng.normal(size=[kernel_sizes[c] for c in rhs]).astype(np.float32) / 8,
            rng.normal(size=(features, 10)).astype(np.float32) / 8,
            rng.normal(size=[sizes[c] for c in lhs]).astype(np.float32),
            rng.integers(0, 10, size=(batch,)).astype(np.int32))


LAYOUTS = [("NCHW", "OIHW"), ("NHWC", "HWIO")]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernel_roles_and_windows_come_from_the_dimension_numbers(mesh, layout):
    # An OIHW kernel leads with its features, an HWIO one trails with them: either way
    # the input features are the FSDP dimension, the output features the tensor-
    # parallel one, and the window (like the images' height and width) is never
    # sharded, nor counted as the model's width (a 3x3 kernel's 3s are no width).
    lhs, rhs = layout
    args = _args(layout, channels=3)
    lowered = jit(_step(layout), mesh=mesh).trace(*args).lower(propagate=False)
    evaluator = Evaluator(lowered.module, hardware("cpu"), mesh)
    reader = evaluator.reader()
    kernel, head, images = (evaluator.arguments[i] for i in range(3))
    window = frozenset(rhs.index(c) for c in "HW")
    assert window_dims(reader, kernel) == window
    assert window_dims(reader, images) == frozenset(lhs.index(c) for c in "HW")
    assert window_dims(reader, head) == frozenset()
    shapes = [a.shape for a in args[:2]]
    width = model_width(shapes, [True, True], [window, frozenset()])
    assert width == 32  # the kernel's output features and the head's input, not 3
    roles = [weight_roles(reader, kernel, width), weight_roles(reader, head, width)]
    assert roles[0] == (rhs.index("I"), rhs.index("O"))
    axes = list(mesh.shape.items())
    _, specs = structured_seeds(shapes, [True, True], axes, roles, [window, frozenset()])[3]
    expected = [()] * 4
    expected[rhs.index("O")] = ("model",)  # 3 input channels: FSDP does not divide them
    assert specs[0] == tuple(expected)
    assert specs[1] == (("data",), ())
    for spec in candidates(args[2].shape, axes, window_dims(reader, images)):
        assert not any(spec[lhs.index(c)] for c in "HW")


def test_a_convolutions_result_is_constrained_closed_off_its_window():
    axes = [("data", 2), ("model", 4)]
    image = (frozenset({2, 3}), 1)  # NCHW
    found = activation_candidates((8, 32, 16, 16), axes, image)
    assert found == [None, (("data",), (), (), ()), (("data",), ("model",), (), ()),
                     (("data", "model"), (), (), ())]
    assert activation_seed((8, 32, 16, 16), axes, True, False, image) == (
        ("data",), ("model",), (), ())
    assert activation_seed((8, 32, 16, 16), axes, False, False, image) == (
        ("data", "model"), (), (), ())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_convolution_results_are_anchors(mesh, layout):
    step = _step(layout)
    args = _args(layout)
    marked = Constrained(step, (), (), lambda index, aval: None)
    closed = marked.jaxpr(*args)[0]
    points = anchors(closed)
    assert any(closed.jaxpr.eqns[i].primitive.name == "conv_general_dilated" for i in points)
    marked.sharding_at = open_marks(mesh, set(points))
    lowered = jit(marked, mesh=mesh).trace(*args).lower(propagate=False)
    evaluator = Evaluator(lowered.module, hardware("cpu"), mesh)
    reader = evaluator.reader()
    lhs, _ = layout
    images = [convolution_result(reader, m) for m in evaluator.marks]
    assert (frozenset(lhs.index(c) for c in "HW"), lhs.index("C")) in images


@pytest.mark.parametrize("layout", LAYOUTS)
def test_auto_conv_step_runs_as_jax_jit_and_beats_the_expert(mesh, layout):
    lhs, rhs = layout
    step = _step(layout)
    args = _args(layout)
    lowered = jit(step, in_shardings=AUTO, out_shardings=AUTO, mesh=mesh).lower(*args)
    in_shardings = lowered.in_shardings[0]
    assert not any(in_shardings[0].spec[rhs.index(c)] for c in "HW" if
                   rhs.index(c) < len(in_shardings[0].spec))
    assert not any(in_shardings[2].spec[lhs.index(c)] for c in "HW" if
                   lhs.index(c) < len(in_shardings[2].spec))
    got = lowered.compile()(*args)
    want = jax.jit(step, in_shardings=in_shardings, out_shardings=lowered.out_shardings)(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # The expert's FSDP x tensor parallel (input features over data, output features
    # over model, the batch over data) prices no faster than AUTO's choice.
    kernel = [None] * 4
    kernel[rhs.index("I")], kernel[rhs.index("O")] = "data", "model"
    expert = [P(*kernel), P("data"), P("data"), P("data")]
    shardings = [NamedSharding(mesh, spec) for spec in expert]
    priced = jit(step, in_shardings=tuple(shardings), mesh=mesh).trace(*args).lower(
        propagate=False)
    assert lowered.auto_report().step.seconds <= modelled_step(priced.module).seconds
