"""Write shardc's Shardy annotations onto the unsharded module jax traced.

Input: the StableHLO module of ``jax.jit(f).trace(...).lower()`` for
unsharded abstract arguments, parsed into a shardc context, and the resolved
argument and result signatures. Output, in place on that module:

* one ``sdy.mesh`` symbol per distinct mesh shape (``@mesh``, ``@mesh_0``,
  ...), and sdy ops jax emitted in the body (``with_sharding_constraint``,
  ``shard_map``) re-pointed at those symbols;
* ``sdy.sharding`` on ``main``'s arguments and results;
* ``mhlo.num_partitions`` / ``mhlo.num_replicas``;
* donation attributes that are valid for the shard shapes (see
  ``fix_donation``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from jaxlib.mlir import ir

from shardc.compiler.diagnostics import internal_message
from shardc.compiler.sharding.walker import mesh_name_of
from shardc.compiler.signature import LeafSignature, shard_shape
from shardc.compiler.stages.lift_inlined_meshes import (
    EMPTY_MESH_NAME,
    STABLEHLO_MESH_ATTR,
    SymbolNamer,
    new_mesh_name,
    stablehlo_mesh_attr,
)
from shardc.dialects import sdy
from shardc.dialects.errors import InternalError, MeshMismatchError, ShardcError

ALIASING_ATTR = "tf.aliasing_output"
BUFFER_DONOR_ATTR = "jax.buffer_donor"
GLOBAL_CONSTANT_ATTR = "jax.global_constant"


def main_function(module: ir.Module) -> ir.Operation:
    """Return the module's public entry function ``@main``."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and _symbol_name(op) == "main":
            return op.operation
    raise ShardcError("the traced module has no func.func @main")


def _symbol_name(op) -> str:
    return ir.StringAttr(op.operation.attributes["sym_name"]).value


# ----------------------------------------------------------------------------
# Mesh symbols
# ----------------------------------------------------------------------------


class MeshSymbols:
    """The mesh symbols of one module: one per distinct mesh shape, in first-use order.

    Names follow Shardy's lifting of inline meshes, which names jax.jit's: ``mesh``,
    ``mesh_0``, ``mesh_1``, ... (``empty_mesh`` for a mesh without axes), unique
    among the module's symbols ``taken`` before (an ``Exported``'s meshes, merged
    into the module under their own names, keep them).
    """

    def __init__(self, taken: set[str] | None = None) -> None:
        self.attrs: dict[str, ir.Attribute] = {}
        self.meshes: dict[str, object] = {}
        self._names = SymbolNamer(taken)

    def symbol_for(self, mesh) -> str:
        attr = sdy.mesh_attr(mesh, with_device_ids=False)
        for name, known in self.attrs.items():
            if known == attr:
                return name
        return self._add(attr, mesh)

    def match(self, attr: ir.Attribute) -> str | None:
        for name, known in self.attrs.items():
            if sdy.same_mesh_shape(known, attr):
                return name
        return None

    def adopt(self, name: str, attr: ir.Attribute) -> None:
        """Take the existing symbol ``@name`` as the one of its mesh shape."""
        self._names.taken.add(name)
        self.attrs[name] = attr
        self.meshes[name] = None

    def _add(self, attr: ir.Attribute, mesh) -> str:
        name = self._names.unique(new_mesh_name(sdy.MeshAttr(attr)))
        self.attrs[name] = attr
        self.meshes[name] = mesh
        return name

    def device_count(self) -> int | None:
        counts = {_device_count(a) for a in self.attrs.values() if sdy.MeshAttr(a).axes}
        if len(counts) > 1:
            raise MeshMismatchError(
                "the shardings of this program use meshes of different device counts: "
                + ", ".join(f"@{n} = {a}" for n, a in self.attrs.items())
            )
        return counts.pop() if counts else None


def _device_count(attr: ir.Attribute) -> int:
    return math.prod(sdy.MeshAxisAttr(a).size for a in sdy.MeshAttr(attr).axes)


def _is_maximal(attr: ir.Attribute) -> bool:
    mesh = sdy.MeshAttr(attr)
    return not mesh.axes and bool(mesh.device_ids)


def unify_body_meshes(module: ir.Module, symbols: MeshSymbols) -> None:
    """Point jax's own ``sdy.mesh`` symbols at ours and write our mesh ops.

    A body mesh with the shape of one of ours is merged into it. When the
    in/out shardings named no mesh, the body's meshes are adopted. A body mesh
    of another shape over as many devices (an ``Exported``'s own mesh, inlined
    where it is called) gets a symbol of its own, as in jax's lowering; over
    another device count it is an error: one program, one set of devices.
    Maximal meshes (host callbacks) are kept as they are.
    """
    renames: list[tuple[str, str]] = []
    merged = _merged_meshes(module)
    for op in _body_meshes(module):
        name, attr = _symbol_name(op), op.operation.attributes["mesh"]
        if _is_maximal(attr) or op in merged:
            continue
        target = symbols.match(attr)
        if target is None:
            counts = {_device_count(a) for a in symbols.attrs.values() if sdy.MeshAttr(a).axes}
            if counts and sdy.MeshAttr(attr).axes and _device_count(attr) not in counts:
                raise MeshMismatchError(
                    f"the function uses mesh {attr} inside its body (from "
                    "with_sharding_constraint or shard_map) but its in/out shardings use "
                    + ", ".join(str(a) for a in symbols.attrs.values())
                    + "; use meshes over the same number of devices"
                )
            target = symbols._add(attr, None)
        renames.append((name, target))
        op.operation.erase()
    _rename_symbols(module, renames)
    # New symbols go after the merged ones, where Shardy's lifting puts them.
    kept = {_symbol_name(op) for op in merged}
    last = merged[-1].operation if merged else None
    for name, attr in symbols.attrs.items():
        if name in kept:
            continue
        op = sdy.MeshOp(name, attr, ip=ir.InsertionPoint.at_block_begin(module.body)).operation
        # As jax's lowering writes its mesh symbols (jax.jit's text).
        op.attributes[STABLEHLO_MESH_ATTR] = stablehlo_mesh_attr(sdy.MeshAttr(attr))
        if last is not None:
            op.move_after(last)
        last = op


def _body_meshes(module: ir.Module) -> list:
    """The ``sdy.mesh`` ops jax's lowering wrote (constraints, shard_map, callbacks)."""
    return [op for op in module.body.operations if op.operation.name == "sdy.mesh"]


def _merged_meshes(module: ir.Module) -> list:
    """The body meshes of ``Exported`` modules jax merged into this one (private, as
    ``merge_mlir_modules`` makes each merged symbol): symbols before jax's lowering
    lifted its inline meshes, so these keep their names and the others are named
    around them."""
    return [op for op in _body_meshes(module)
            if "sym_visibility" in op.operation.attributes
            and ir.StringAttr(op.operation.attributes["sym_visibility"]).value == "private"
            and not _is_maximal(op.operation.attributes["mesh"])]


def mesh_symbols_for(module: ir.Module) -> MeshSymbols:
    """Empty ``MeshSymbols`` for ``module``, its merged meshes adopted under their names
    and its other symbols (functions) taken, as Shardy's lifting sees them in jax.jit."""
    body_meshes = {_symbol_name(op) for op in _body_meshes(module)}
    symbols = MeshSymbols({
        _symbol_name(op) for op in module.body.operations
        if "sym_name" in op.operation.attributes and _symbol_name(op) not in body_meshes
    })
    for op in _merged_meshes(module):
        symbols.adopt(_symbol_name(op), op.operation.attributes["mesh"])
    return symbols


def _rename_symbols(module: ir.Module, renames: Sequence[tuple[str, str]]) -> None:
    # Through unique temporary names, so that swapping "mesh" and "mesh_0" works.
    # A symbol kept by its own name (jax's @mesh is mostly shardc's @mesh) is left
    # alone: each rename walks the whole module.
    renames = [(old, new) for old, new in renames if old != new]
    op = module.operation
    temporary = [(old, f"__shardc_rename_{i}", new) for i, (old, new) in enumerate(renames)]
    for old, tmp, _ in temporary:
        ir.SymbolTable.replace_all_symbol_uses(old, tmp, op)
    for _, tmp, new in temporary:
        ir.SymbolTable.replace_all_symbol_uses(tmp, new, op)


# ----------------------------------------------------------------------------
# main's attributes
# ----------------------------------------------------------------------------


def sharding_attr_for(
    leaf: LeafSignature, value_type: ir.Type, symbols: MeshSymbols
) -> ir.Attribute | None:
    """The ``#sdy.sharding`` to write for one argument or result, or ``None``.

    The rank is the one of the value in ``@main`` (its physical type), not of
    the jax value: a PRNG key array ``key<fry>[8]`` is ``tensor<8x2xui32>`` there
    and its sharding gets the extra trailing ``{}``.
    """
    sharding = leaf.sharding
    if sharding is None or not isinstance(value_type, ir.RankedTensorType):
        return None  # tokens carry no sharding
    ndim = value_type.rank
    if sdy.is_unspecified(sharding.spec, ndim):
        return None
    return sdy.sharding_attr(
        sharding.spec, sharding.mesh, ndim, mesh_symbol=symbols.symbol_for(sharding.mesh)
    )


def _attr_dicts(func: ir.Operation, which: str, count: int) -> list[dict[str, ir.Attribute]]:
    """The per-argument (or per-result) attribute dicts of ``func`` as Python dicts."""
    attr_name = "arg_attrs" if which == "args" else "res_attrs"
    if attr_name not in func.attributes:
        return [{} for _ in range(count)]
    # Entries are uniqued and arguments mostly share a few: each is read once.
    read: dict[ir.Attribute, dict[str, ir.Attribute]] = {}
    dicts = []
    for entry in ir.ArrayAttr(func.attributes[attr_name]):
        entries = read.get(entry)
        if entries is None:
            entries = read[entry] = {named.name: named.attr for named in ir.DictAttr(entry)}
        dicts.append(dict(entries))
    return dicts


def _set_attr_dicts(func: ir.Operation, which: str, dicts: Sequence[dict]) -> None:
    attr_name = "arg_attrs" if which == "args" else "res_attrs"
    func.attributes[attr_name] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])


def set_function_attrs(
    func: ir.Operation, key: str, values: Sequence[ir.Attribute | None], which: str,
    offset: int = 0,
) -> None:
    """Set (or remove, for ``None``) ``key`` in each arg/result attribute dict, from the
    ``offset``-th on."""
    dicts = _attr_dicts(func, which, offset + len(values))
    _put(dicts[offset:], key, values)
    _set_attr_dicts(func, which, dicts)


def user_offsets(module: ir.Module, tokens: int) -> tuple[int, int]:
    """Where the user's arguments and results start among ``@main``'s: after jax's
    global constants (arguments only) and the ``tokens`` ordered effects' tokens."""
    return _global_constant_arguments(main_function(module)) + tokens, tokens


def _put(dicts: Sequence[dict], key: str, values: Sequence[ir.Attribute | None]) -> None:
    for entries, value in zip(dicts, values):
        entries.pop(key, None)
        if value is not None:
            entries[key] = value


def fix_donation(
    func: ir.Operation, args: Sequence[LeafSignature], results: Sequence[LeafSignature]
) -> None:
    """Pair donated arguments with results whose shard buffers really match.

    jax marks the donated arguments (``tf.aliasing_output = k`` or
    ``jax.buffer_donor = true``) from the types it traced, which do not know
    the shardings shardc writes. Paired as jax pairs them (each result, in
    order, takes the first unpaired donated argument it can alias), an alias
    needs given, closed shardings on both sides and equal shard shapes and
    dtypes; any other donated argument becomes ``jax.buffer_donor = true``,
    which lets XLA pick (an invalid alias fails to compile).
    """
    dicts = _attr_dicts(func, "args", len(args))
    _pair_donations(dicts, args, results)
    _set_attr_dicts(func, "args", dicts)


def donate_only_where(func: ir.Operation, args: Sequence[LeafSignature],
                      results: Sequence[LeafSignature],
                      compatible: Callable[[LeafSignature, LeafSignature], bool],
                      offsets: tuple[int, int] = (0, 0)) -> None:
    """Each alias of ``func`` whose argument and result ``compatible(arg, result)``
    refuses (another layout, another memory) becomes a buffer donor: XLA may still
    reuse the buffer elsewhere, as jax falls back to. ``offsets``: where ``args``
    and ``results`` start among ``@main``'s (``user_offsets``)."""
    arg_offset, result_offset = offsets
    dicts = _attr_dicts(func, "args", arg_offset + len(args))
    for arg, entries in zip(args, dicts[arg_offset:]):
        alias = entries.get(ALIASING_ATTR)
        if alias is None or ir.IntegerAttr(alias).value < result_offset:
            continue
        if not compatible(arg, results[ir.IntegerAttr(alias).value - result_offset]):
            del entries[ALIASING_ATTR]
            entries[BUFFER_DONOR_ATTR] = ir.BoolAttr.get(True)
    _set_attr_dicts(func, "args", dicts)


def _pair_donations(dicts: Sequence[dict], args: Sequence[LeafSignature],
                    results: Sequence[LeafSignature], *, tokens: int = 0,
                    writes: Sequence[int | None] = ()) -> None:
    """``fix_donation`` on the arguments' attribute dicts (after ``tokens`` leading
    token results: aliases count them). ``writes`` pairs results with the ``Ref``
    arguments they update first, as jax pairs them (``shardc.runtime.effects``)."""
    donated = []
    for k, entries in enumerate(dicts):
        was_donated = ALIASING_ATTR in entries or BUFFER_DONOR_ATTR in entries
        entries.pop(ALIASING_ATTR, None)
        entries.pop(BUFFER_DONOR_ATTR, None)
        if was_donated:
            donated.append(k)
    i32 = ir.IntegerType.get_signless(32)
    written = {k: out_index for out_index, k in enumerate(writes) if k is not None}
    for k, out_index in written.items():
        if k in donated and _shards_match(args[k], results[out_index]):
            donated.remove(k)
            dicts[k][ALIASING_ATTR] = ir.IntegerAttr.get(i32, tokens + out_index)
    for out_index, out in enumerate(results):
        if out_index in written.values():
            continue
        match = next((k for k in donated if _shards_match(args[k], out)), None)
        if match is not None:
            donated.remove(match)
            dicts[match][ALIASING_ATTR] = ir.IntegerAttr.get(i32, tokens + out_index)
    for k in donated:
        dicts[k][BUFFER_DONOR_ATTR] = ir.BoolAttr.get(True)


def _shards_match(arg: LeafSignature, out: LeafSignature) -> bool:
    for leaf in (arg, out):
        spec = leaf.sharding.spec if leaf.sharding is not None else None
        if spec is None or any(e is spec.UNCONSTRAINED for e in sdy.spec_dims(spec)):
            return False
    return arg.aval.dtype == out.aval.dtype and shard_shape(
        arg.sharding, arg.aval.shape
    ) == shard_shape(out.sharding, out.aval.shape)


# ----------------------------------------------------------------------------
# The whole annotation step
# ----------------------------------------------------------------------------


def unsharded_scalars(module: ir.Module) -> tuple[int, ...]:
    """The scalar arguments of ``@main`` without a sharding, in a program over several
    devices: those jax.jit's lowering gives the replicated sharding (``pxla``: an
    unspecified sharding of a rank-0 argument becomes ``GSPMDSharding.get_replicated``,
    written on the empty mesh)."""
    partitions = module.operation.attributes.get("mhlo.num_partitions")
    if partitions is None or ir.IntegerAttr(partitions).value <= 1:
        return ()
    func = main_function(module)
    inputs = _inputs(func)
    return tuple(i for i, (type_, entries) in enumerate(zip(inputs, _attr_dicts(
                     func, "args", len(inputs))))
                 if isinstance(type_, ir.RankedTensorType) and type_.rank == 0
                 and sdy.SHARDING_ATTR not in entries)


def replicate_scalars(module: ir.Module, scalars: Sequence[int]) -> None:
    """Give the arguments at ``scalars`` (``unsharded_scalars``) jax.jit's replicated
    sharding on the empty mesh, declaring ``@empty_mesh`` where jax's lowering
    declares it. For the module as lowered (jax.jit's text) only: a value of no
    dimension is replicated either way, so propagation is not given it."""
    func = main_function(module)
    dicts = _attr_dicts(func, "args", len(_inputs(func)))
    replicated = ir.Attribute.parse(
        f"#sdy.sharding<@{_empty_mesh_symbol(module, func, scalars[0])}, []>")
    for i in scalars:
        dicts[i][sdy.SHARDING_ATTR] = replicated
    _set_attr_dicts(func, "args", dicts)


def _inputs(func: ir.Operation) -> list[ir.Type]:
    return ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs


def _empty_mesh_symbol(module: ir.Module, func: ir.Operation, argument: int) -> str:
    """The module's symbol of the empty mesh, declared (if it is not) before the first
    mesh symbol whose first use, in ``@main``'s arguments then results, comes after
    ``argument``'s."""
    meshes = _body_meshes(module)
    for op in meshes:
        mesh = sdy.MeshAttr(op.operation.attributes["mesh"])
        if not mesh.axes and not list(mesh.device_ids):
            return _symbol_name(op)
    first_use: dict[str, int] = {}
    entries = [*_attr_dicts(func, "args", 0), *_attr_dicts(func, "results", 0)]
    for position, entry in enumerate(entries):
        if sdy.SHARDING_ATTR in entry:
            used = mesh_name_of(sdy.TensorShardingAttr(entry[sdy.SHARDING_ATTR]))
            first_use.setdefault(used, position)
    attr = ir.Attribute.parse("#sdy.mesh<[]>")
    name = SymbolNamer.of_module(module.operation).unique(EMPTY_MESH_NAME)
    later = next((op for op in meshes
                  if first_use.get(_symbol_name(op), len(entries)) > argument), None)
    op = sdy.MeshOp(name, attr, ip=ir.InsertionPoint.at_block_begin(module.body)).operation
    op.attributes[STABLEHLO_MESH_ATTR] = stablehlo_mesh_attr(sdy.MeshAttr(attr))
    if later is not None:
        op.move_before(later.operation)
    elif meshes:
        op.move_after(meshes[-1].operation)
    return name


def _global_constant_arguments(func: ir.Operation) -> int:
    """How many of ``@main``'s first arguments are jax's global constants: the platform
    index of a lowering for several platforms and the dimension variables of
    symbolic shapes (``jax.global_constant``), which come before the array
    arguments and carry no sharding."""
    dicts = _attr_dicts(func, "args", 0)
    return next((i for i, d in enumerate(dicts) if GLOBAL_CONSTANT_ATTR not in d), len(dicts))


def annotate(
    module: ir.Module, args: Sequence[LeafSignature], results: Sequence[LeafSignature],
    context: object | None = None, *, tokens: int = 0, writes: Sequence[int | None] = (),
) -> MeshSymbols:
    """Write meshes, shardings, partition counts and donation onto ``module``.

    ``context`` is the concrete context mesh (``jax.set_mesh``'s): a program whose
    own shardings name no mesh runs on it, its unspecified values replicated, as
    under jax.jit. ``args`` and ``results`` are ``@main``'s after its leading jax
    global constants (``_global_constant_arguments``) and ``tokens`` tokens (ordered
    effects'), which carry no sharding; ``writes`` says
    which results update which ``Ref`` arguments (``shardc.runtime.effects``)."""
    func = main_function(module)
    function_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    leading = _global_constant_arguments(func)  # before the tokens, as jax orders them
    prefix = leading + tokens
    inputs, outputs = function_type.inputs[prefix:], function_type.results[tokens:]
    if len(inputs) != len(args) or len(outputs) != len(results):
        reason = (f"the traced @main has {len(inputs)} arguments and {len(outputs)} results "
                  f"after its {leading} global constants and {tokens} tokens but the call "
                  f"has {len(args)} and {len(results)}")
        raise InternalError(internal_message("annotate", reason), step="annotate", reason=reason)
    symbols = mesh_symbols_for(module)
    # Many leaves share a sharding and a type: each pair is converted once.
    converted: dict[tuple, ir.Attribute | None] = {}

    def attr_for(leaf: LeafSignature, value_type: ir.Type) -> ir.Attribute | None:
        sharding = leaf.sharding
        if sharding is None:
            return None
        key = (sharding.spec, sharding.mesh, value_type)
        if key not in converted:
            converted[key] = sharding_attr_for(leaf, value_type, symbols)
        return converted[key]

    arg_attrs = [attr_for(leaf, t) for leaf, t in zip(args, inputs)]
    res_attrs = [None] * tokens + [attr_for(leaf, t) for leaf, t in zip(results, outputs)]
    if context is not None and symbols.device_count() is None and not any(
            sdy.MeshAttr(op.operation.attributes["mesh"]).axes for op in _body_meshes(module)):
        symbols.symbol_for(context)
    unify_body_meshes(module, symbols)
    partitions = symbols.device_count()
    # The arguments' dicts are read and written once, for shardings and donation.
    arg_dicts = _attr_dicts(func, "args", prefix + len(arg_attrs))
    _put(arg_dicts[prefix:], sdy.SHARDING_ATTR, arg_attrs)
    if partitions is not None:
        _pair_donations(arg_dicts[prefix:], args, results, tokens=tokens, writes=writes)
    _set_attr_dicts(func, "args", arg_dicts)
    set_function_attrs(func, sdy.SHARDING_ATTR, res_attrs, "results")
    if partitions is not None:
        i32 = ir.IntegerType.get_signless(32)
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, partitions)
        module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    return symbols
