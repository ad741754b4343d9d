"""The exception types shardc raises, shared by every layer.

They live in the lowest layer (``shardc.dialects``) so that the sharding
bridge, the compiler and the runtime can all raise them; ``shardc.compiler``
re-exports them for users. Every error is also a ``ValueError`` or a
``TypeError``, so code written against jax's own exceptions keeps working.
"""

from __future__ import annotations


class ShardcError(Exception):
    """Base of every error shardc raises on purpose."""


class ShardingError(ShardcError, ValueError):
    """A sharding that cannot be applied to a value or a mesh."""


class UnknownAxisError(ShardingError):
    """A sharding names an axis its mesh does not have."""


class DuplicateAxisError(ShardingError):
    """A sharding uses the same mesh axis more than once."""


class RankMismatchError(ShardingError):
    """A sharding has more dimensions than the value it applies to."""


class IndivisibleDimensionError(ShardingError):
    """A dimension's size is not a multiple of the product of its axes."""


class NoPartitionSpecFormError(ShardingError):
    """An sdy sharding that no ``PartitionSpec`` can express (sub-axes, priorities...)."""


class ShardingTreeError(ShardingError):
    """``in_shardings`` / ``out_shardings`` that are not a pytree prefix of the arguments /
    results (jax's ``ValueError``)."""


class MeshMismatchError(ShardingError):
    """Two meshes in one program that cannot be used together."""


class ArgumentShardingError(ShardingError):
    """A committed argument whose sharding is not the one given for it: jax.jit does
    not move committed data behind the user's back, and neither does shardc."""


class LayoutMismatchError(ShardcError, ValueError):
    """A device-local layout that cannot be used: one given to jit that a committed
    argument's own contradicts, one a value's rank cannot have, a committed argument
    not in the layout its program was compiled for (jax's ``ValueError``s)."""


class MissingMeshError(ShardcError, RuntimeError):
    """A ``PartitionSpec`` was given but no mesh is known to resolve it against (jax's
    ``RuntimeError``)."""


class DeviceMismatchError(ShardcError, ValueError):
    """Arguments or shardings committed to different sets of devices."""


class PytreeMismatchError(ShardcError, TypeError):
    """Shardings or arguments whose pytree structure does not fit the function's."""


class InvalidArgumentError(ShardcError, TypeError):
    """An argument of a type shardc cannot lower or place."""


class InvalidOptionError(ShardcError, ValueError):
    """A shardc option of ``jit`` of the right type with a value it cannot take."""


class DeletedArrayError(ShardcError, RuntimeError):
    """An argument whose buffers were deleted (by ``delete()`` or by donation), as jax's
    ``RuntimeError`` says it."""


class UncommittedArrayError(ShardcError, NotImplementedError):
    """An uncommitted array sharded over several devices: jax decides where an
    uncommitted array goes only for one device (jax's ``NotImplementedError``)."""


class LoweringPlatformsError(ShardcError, ValueError):
    """A program whose meshes are all abstract, lowered without ``lowering_platforms``
    (jax's ``ValueError``): nothing says which devices, or which platform, it is for."""


class PlatformMismatchError(ShardcError, RuntimeError):
    """A program lowered for given platforms (``lowering_platforms``) on abstract meshes
    and compiled without devices, as jax's ``RuntimeError`` says it."""


class UnshardableEffectError(ShardcError, ValueError):
    """An ordered effect jax runs on one device only, in a program of several."""


class NotExecutableError(ShardcError, AttributeError):
    """A program compiled ahead of time for devices this process cannot address (a
    topology's, ``jax.experimental.topologies``) was called: an ``AttributeError``
    as jax's executable raises then (it has no ``local_devices``)."""


class InternalError(ShardcError, RuntimeError):
    """shardc produced an invalid module: a bug in shardc, not in the program.

    ``step`` names the pass or pipeline step that produced it, ``reason`` is
    what the MLIR verifier said, ``op`` the first op it rejected and
    ``location`` where that op is.
    """

    def __init__(self, message: str, *, step: str, reason: str, op: str | None = None,
                 location: object = None) -> None:
        super().__init__(message)
        self.step = step
        self.reason = reason
        self.op = op
        self.location = location
