"""What the communication tests hold equal: ``Lowered.comm_report()``'s bytes per
device per collective kind and ``Compiled.collectives()``'s, for one program."""

import jax
from jax.sharding import AxisType, NamedSharding

from shardc.compiler import jit


def mesh(shape=(4, 2), names=("data", "model")):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def predicted_and_compiled(fun, args, specs, out=None, grid=None):
    """``fun`` on ``args`` placed with ``specs`` (and results with ``out``) on ``grid``:
    the predicted and the compiled bytes per device of each kind that occurs."""
    grid = grid or mesh()
    shardings = tuple(NamedSharding(grid, spec) for spec in specs)
    placed = tuple(jax.device_put(a, s) for a, s in zip(args, shardings))
    out_shardings = None if out is None else NamedSharding(grid, out)
    lowered = jit(fun, in_shardings=shardings, out_shardings=out_shardings).lower(*placed)
    predicted = {k: t.bytes_per_device for k, t in lowered.comm_report().totals().items()
                 if t.count}
    compiled = {k: c.bytes_per_device for k, c in lowered.compile().collectives().items()
                if c.count}
    return predicted, compiled
