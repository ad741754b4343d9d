"""Shardy's import and export stages: what runs before and after propagation.

The modules here are Shardy's ``transforms/import`` and ``transforms/export``
steps as functions of a module: inlining calls and lifting inline meshes,
removing size-one axes, splitting constants, adding data-flow edges and
applying sharding constraints on the way in (``import_pipeline``); merging
constants, sinking data-flow edges, turning constraints into reshards,
closing shardings and dropping rules on the way out (``export_pipeline``).
Also here: the rewrites XLA's own import makes before its Shardy runs
(``fold_identities``, ``capture_loop_invariants``), which ``jit`` applies so that
propagation sees the module XLA's Shardy sees. They read and write IR only; the
propagation engine (``shardc.compiler.propagation``) runs between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from jaxlib.mlir import ir, passmanager

from shardc.compiler.diagnostics import verify_step
from shardc.compiler.propagation.data_flow_ops import DATA_FLOW_OPS
from shardc.compiler.propagation.graph import NEVER_DEAD, PropagationGraph
from shardc.compiler.propagation.ir_access import EDGE_OP, ShardingStore
from shardc.compiler.propagation.manual import MANUAL_OP
from shardc.compiler.sharding.walker import Census, ShardingMapper, census
from shardc.compiler.stages import export_steps, import_steps
from shardc.compiler.stages.apply_constraints import apply_sharding_constraints
from shardc.compiler.stages.capture_loop_invariants import (
    hoist_loop_invariants,
    open_free_variables,
)
from shardc.compiler.stages.constants_last import COMMUTATIVE, put_constants_last
from shardc.compiler.stages.data_flow_edges import add_data_flow_edges, sink_data_flow_edges
from shardc.compiler.stages.dead_constraints import CONSTRAINT, erase_dead_constraints
from shardc.compiler.stages.dedup_meshes import dedup_meshes
from shardc.compiler.stages.fold_identities import fold_identities
from shardc.compiler.stages.hlo_order import order_as_hlo
from shardc.compiler.stages.inline_calls import CALL_OP, inline_all_calls
from shardc.compiler.stages.lift_inlined_meshes import MESH_OP, InlineMeshes, lift_inlined_meshes
from shardc.dialects.sdy import SHARDING_ATTR, SHARDING_RULE_ATTR


def _generic(module: ir.Operation, pipeline: str) -> None:
    pm = passmanager.PassManager.parse(f"builtin.module({pipeline})", module.context)
    # MLIR's generic passes keep a valid module valid, and verifying it afterwards
    # costs twice the pass (verify_step still checks every step when asked to).
    pm.enable_verifier(False)
    pm.run(module)


def xla_import_rewrites(module: ir.Operation, census: bool = False) -> ImportCensus | None:
    """``inline_all_calls``, ``fold_identities``, ``erase_dead_constraints``,
    ``put_constants_last``, then ``capture_loop_invariants`` with the blocks put in HLO's order between its
    hoisting and its opening (``order_as_hlo``: ``hlo_order.restore_jax_order``
    puts them back once propagated), the loops and constraints found by the walk
    that folds, then ``dedup_meshes``; with ``census``, returns the import
    stage's census, taken by that walk too.

    No rewrite adds or copies a call or a sharding naming a mesh the census has
    not seen (a rebuilt loop keeps its blocks, a constraint opened before one
    takes a sharding its free variable has), and erasing dead constraints erases
    no call: the census stands for the module they leave, for ``import_pipeline``
    (a mesh it saw named inline only by an erased constraint is one lifted for
    nothing).
    """
    loops: list[ir.Operation] = []
    constraints: list[ir.Operation] = []
    found = ImportCensus() if census else None

    commutative: list[ir.Operation] = []

    def look(op: ir.Operation, name: str) -> None:
        if name == CONSTRAINT:
            constraints.append(op)
        elif name in COMMUTATIVE:
            commutative.append(op)
        if found is not None:
            found.look(op, name)

    # XLA inlines calls before it orders the ops (its CallInliner); a loop's
    # invariant carries are captures by the time it orders them (read after the
    # loop's operands), and its import opens them afterwards, before the loop.
    inline_all_calls(module)
    fold_identities(module, loops, look)
    erase_dead_constraints(constraints)
    put_constants_last(commutative)
    rebuilt = hoist_loop_invariants(module, loops)
    order_as_hlo(module)
    for loop in rebuilt:
        open_free_variables(loop)
    dedup_meshes(module)
    return found


def main_func(module: ir.Operation) -> ir.Operation | None:
    """The single function, or the one named ``main``."""
    funcs = [op.operation for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func"]
    if len(funcs) == 1:
        return funcs[0]
    for func in funcs:
        if ir.StringAttr(func.attributes["sym_name"]).value == "main":
            return func
    return None


# Symbols that hold no symbols of their own: public ones, symbol-dce always keeps.
_PUBLIC_SYMBOL_OPS = frozenset({"func.func", "sdy.mesh"})


def symbol_dce(module: ir.Operation) -> None:
    """MLIR's ``symbol-dce``: drop functions nothing calls."""
    # The pass walks every op for symbol uses; a module whose top level holds only
    # public functions and meshes (no callee left) has nothing it could drop.
    if not all(_public_leaf_symbol(op.operation)
               for op in module.regions[0].blocks[0].operations):
        _generic(module, "symbol-dce")


def _public_leaf_symbol(op: ir.Operation) -> bool:
    if op.name not in _PUBLIC_SYMBOL_OPS:
        return False
    attributes = op.attributes
    return ("sym_visibility" not in attributes
            or ir.StringAttr(attributes["sym_visibility"]).value == "public")


def remove_sub_axes_in_main_io_shardings(module: ir.Operation) -> None:
    """``export_steps.remove_sub_axes_in_io_shardings`` on the main function."""
    export_steps.remove_sub_axes_in_io_shardings(module, main_func(module))


Step = Callable[[ir.Operation], object]

# The ops each step rewrites: a module holding none of them is left as it is, so a
# pipeline skips the step rather than walk the module for nothing. No step creates
# an op that a later step of its pipeline looks for here (but for the constraints
# ``remove_sharding_groups`` pins constants with, which the export pipeline counts
# in), so the names found once (by a census, or by a step that walks every op
# anyway and returns one) serve every later step.
_REWRITTEN_OPS: dict[Step, frozenset[str]] = {
    inline_all_calls: frozenset({"func.call"}),
    import_steps.manual_axes_cleanup: frozenset({MANUAL_OP}),
    add_data_flow_edges: frozenset(DATA_FLOW_OPS),
    apply_sharding_constraints: frozenset({"sdy.sharding_constraint", MANUAL_OP}),
    sink_data_flow_edges: frozenset({EDGE_OP, *DATA_FLOW_OPS}),
    export_steps.remove_sharding_groups: frozenset({"sdy.sharding_group"}),
    export_steps.sharding_constraint_to_reshard: frozenset({"sdy.sharding_constraint"}),
}


def run_steps(module: ir.Operation, steps: Sequence[Step],
              present: frozenset[str] | None = None) -> None:
    """Run each step on ``module``, verifying after each when step verification is on;
    with ``present`` (the names of the module's ops, or a superset), skip the steps
    that rewrite none of those. A step returning a ``Census`` gives ``present``."""
    for step in steps:
        if present is not None and present.isdisjoint(_REWRITTEN_OPS.get(step, present)):
            continue
        found = step(module)
        if isinstance(found, Census):
            present = found.names
        verify_step(module, step.__name__)


class ImportCensus:
    """What the import stage needs to know of a module, from one walk: its calls in
    pre-order, and whether some sharding names its mesh inline. ``look`` is shown
    every op the walk meets (calls have no regions: their post-order is their
    pre-order)."""

    def __init__(self) -> None:
        self.calls: list[ir.Operation] = []
        self.inline_meshes = InlineMeshes()

    def look(self, op: ir.Operation, name: str) -> None:
        if name == CALL_OP:
            self.calls.append(op)
        if not self.inline_meshes.found and name != "builtin.module":
            self.inline_meshes.look(op, name)


def _import_census(module: ir.Operation) -> ImportCensus:
    """The import stage's own walk, for a module no earlier walk took its census of."""
    found = ImportCensus()

    def visit(op: ir.Operation) -> ir.WalkResult:
        found.look(op, op.name)
        return ir.WalkResult.ADVANCE

    for op in module.regions[0].blocks[0].operations:
        op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def import_pipeline(module: ir.Operation, census: ImportCensus | None = None) -> None:
    """Shardy's import stage, with calls inlined; ``census``: the module's, where a
    walk made before took it (``xla_import_rewrites``)."""
    # Shardy drops the functions nothing calls before it imports the calls, and its
    # symbol-dce after inlining drops those together with the inlined callees: one
    # pass leaves the functions two would (the calls inside a function nothing calls
    # are inlined there for nothing; JAX emits no such function).
    # Inlining copies ops, shardings and all, and adds none: the shardings found
    # before it are those lift_inlined_meshes would look at after it.
    if census is None:
        census = _import_census(module)
    inline_all_calls(module, census.calls)
    verify_step(module, inline_all_calls.__name__)
    symbol_dce(module)
    verify_step(module, symbol_dce.__name__)
    lift_inlined_meshes(module, inline_meshes=census.inline_meshes.found)
    verify_step(module, lift_inlined_meshes.__name__)
    run_steps(module, (
        import_steps.remove_size_one_axes,
        import_steps.constant_or_scalar_splitter,
        import_steps.manual_axes_cleanup,
        add_data_flow_edges,
        apply_sharding_constraints,
    ))


class _ExportCensus(NamedTuple):
    """What the export stage's one walk found.

    ``census``: the names of the module's ops, and whether one has a sharding rule;
    ``copies``: the ops ``constant_or_scalar_merger`` looks at. Where ``complete``
    (the module holds functions and meshes only, and no op a step before
    ``close_shardings`` adds, erases or re-shards but the merger's copies and
    data-flow edges), the rest stands for the module when ``close_shardings``
    runs: ``funcs``, its functions; ``sharded``, each op and the sharding
    attribute it has; ``reread``, the ops whose shardings are read only then
    (sdy ops, and data-flow ops that sinking edges gives shardings); and
    ``unused``, whether some op that could be dead has no used result.
    """

    census: Census
    copies: list[ir.Operation]
    complete: bool
    funcs: list[ir.Operation]
    sharded: list[tuple[ir.Operation, ir.Attribute]]
    reread: list[ir.Operation]
    unused: bool


# Ops the census leaves out of what closing looks at: sinking erases every edge,
# and a sharding group holds no sharding.
_UNSHARDED = frozenset({EDGE_OP, "sdy.sharding_group"})
# Sdy ops whose only sharding is their ``sdy.sharding``, like any other op's.
_PLAIN_SDY = frozenset({"sdy.constant"})


def _export_census(module: ir.Operation, keep_constraints: bool) -> _ExportCensus:
    """One walk for the export stage (see ``_ExportCensus``)."""
    names = {module.name}
    found = SHARDING_RULE_ATTR in module.attributes
    copies: list[ir.Operation] = []
    funcs: list[ir.Operation] = []
    sharded: list[tuple[ir.Operation, ir.Attribute]] = []
    reread: list[ir.Operation] = []
    unused = False

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal found, unused
        name = op.name
        names.add(name)
        attributes = op.attributes
        if not found and SHARDING_RULE_ATTR in attributes:
            found = True
        if name in export_steps.MERGED:
            copies.append(op)
        if name in DATA_FLOW_OPS or (name.startswith("sdy.") and name not in _PLAIN_SDY):
            if name not in _UNSHARDED:
                reread.append(op)
        elif (sharding := attributes.get(SHARDING_ATTR)) is not None:
            sharded.append((op, sharding))
        if not unused and name not in NEVER_DEAD:
            # As erase_dead_ops' _has_unused_op asks it.
            for result in op.results:
                if next(iter(result.uses), None) is not None:
                    return ir.WalkResult.ADVANCE
            if not op.has_trait(ir.IsTerminatorTrait):
                unused = True
        return ir.WalkResult.ADVANCE

    complete = True
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            funcs.append(op)
            op.walk(visit, ir.WalkOrder.POST_ORDER)
        else:
            # The merger looks in functions only.
            other = census(op, SHARDING_RULE_ATTR)
            names.update(other.names)
            found = found or other.has_attribute
            complete = complete and op.name == MESH_OP
    return _ExportCensus(Census(frozenset(names), found), copies,
                         complete and names.isdisjoint(_rewritten_ops(keep_constraints)),
                         funcs, sharded, reread, unused)


def _rewritten_ops(keep_constraints: bool) -> frozenset:
    """The ops the export's steps rewrite (the census is incomplete where one is)."""
    rewritten = _REWRITTEN_OPS[export_steps.remove_sharding_groups]
    if not keep_constraints:
        rewritten = rewritten | _REWRITTEN_OPS[export_steps.sharding_constraint_to_reshard]
    return rewritten


class PropagatedRead(NamedTuple):
    """The graph and store a propagation of the module ran on, written back
    (``propagation.propagate_read``), and whether it kept the rules it computed
    (``keep_sharding_rules``): what the export stage would otherwise walk the module for."""

    graph: PropagationGraph
    store: ShardingStore
    rules_kept: bool


def _export_census_of_read(module: ir.Operation, read: PropagatedRead,
                           keep_constraints: bool) -> _ExportCensus:
    """``_export_census`` from the propagation's own read of the module, no walk.

    The graph holds every op the written module holds but those it marks erased,
    in pre-order: the merger's copies have no regions, so their pre-order is their
    post-order. The store holds each op's ``sdy.sharding`` as written (an op without
    results is read from the IR: the store gives it no slot). A sharding rule is
    left on an op only where the propagation kept the rules it computed, or where a
    rule is custom, which no export step drops: ``census.has_attribute`` says
    whether the export has rules to drop.
    """
    graph, store = read.graph, read.store
    names = {module.name}
    copies: list[ir.Operation] = []
    funcs: list[ir.Operation] = []
    sharded: list[tuple[ir.Operation, ir.Attribute]] = []
    reread: list[ir.Operation] = []
    unused = False
    complete = True
    ops, erased, parent, uses = graph.ops, graph.erased, graph.op_parent, graph.uses
    attrs = store.sharding_attrs
    in_func = [False] * len(ops)
    for op, (name, results) in enumerate(zip(graph.op_name, graph.op_results)):
        if erased[op]:
            continue
        names.add(name)
        above = parent[op]
        if above < 0:
            if name == "func.func":
                funcs.append(ops[op])
                in_func[op] = True
            else:
                complete = complete and name == MESH_OP
            continue
        if not in_func[above]:
            continue
        in_func[op] = True
        if name in export_steps.MERGED:
            copies.append(ops[op])
        if name in DATA_FLOW_OPS or (name.startswith("sdy.") and name not in _PLAIN_SDY):
            if name not in _UNSHARDED:
                reread.append(ops[op])
        else:
            sharding = (attrs.get(op) if results
                        else ops[op].attributes.get(SHARDING_ATTR))
            if sharding is not None:
                sharded.append((ops[op], sharding))
        if (not unused and name not in NEVER_DEAD and not graph.op_terminator[op]
                and not any(uses[value] for value in results)):
            unused = True
    # The funcs themselves: as the walk of each function meets it, last.
    for func in funcs:
        sharding = func.attributes.get(SHARDING_ATTR)
        if sharding is not None:
            sharded.append((func, sharding))
    found = read.rules_kept or SHARDING_RULE_ATTR in module.attributes
    return _ExportCensus(Census(frozenset(names), found), copies,
                         complete and names.isdisjoint(_rewritten_ops(keep_constraints)),
                         funcs, sharded, reread, unused)


def _close_found_shardings(found: _ExportCensus, erased: list[ir.Operation]) -> None:
    """``close_shardings`` on the ops the census found, less those the merger erased."""
    gone = {id(op) for op in erased}
    mapper = ShardingMapper(export_steps.closed)
    for func in found.funcs:
        mapper.map_func_io(func)
    mapper.map_attrs([pair for pair in found.sharded if id(pair[0]) not in gone],
                     SHARDING_ATTR)
    for op in found.reread:
        if id(op) not in gone:
            mapper.map_op(op)


def fix_io_shardings(module: ir.Operation, store: ShardingStore | None = None) -> None:
    """``export_steps.fix_io_shardings`` with the main function (``store``: as there)."""
    export_steps.fix_io_shardings(module, main_func(module), store)


def export_pipeline(
    module: ir.Operation,
    *,
    keep_sharding_rules: bool = False,
    explicit_reshards: Callable[[ir.Operation], None] | None = None,
    keep_constraints: bool = False,
    read: PropagatedRead | None = None,
) -> None:
    """Shardy's export stage; ``explicit_reshards`` runs where Shardy inserts explicit
    reshards; ``read``: the propagation's, where the module was just propagated and
    written back (the stage then takes its census from it instead of a walk).

    The propagation pipeline passes none, like jaxlib's native pipeline for the
    programs we compared; ``shardc-export-pipeline`` passes
    ``insert_explicit_reshards``. ``keep_constraints`` leaves the (closed)
    ``sdy.sharding_constraint`` ops where Shardy turns them into ``sdy.reshard``:
    the same reshard for XLA, and a lowering that reads like jax.jit's, where
    every ``with_sharding_constraint`` is a constraint.
    """
    found = (_export_census(module, keep_constraints) if read is None
             else _export_census_of_read(module, read, keep_constraints))
    names = found.census.names
    if "sdy.sharding_group" in names:
        # Removing the groups pins their constants with constraints.
        names = names | {"sdy.sharding_constraint"}
    # Only ``explicit_reshards`` may write rules after this.
    drops_rules = not keep_sharding_rules and (found.census.has_attribute
                                               or explicit_reshards is not None)
    erased = export_steps.constant_or_scalar_merger(module, found.copies)
    verify_step(module, export_steps.constant_or_scalar_merger.__name__)
    run_steps(module, (
        sink_data_flow_edges,
        export_steps.remove_sharding_groups,
        *(() if keep_constraints else (export_steps.sharding_constraint_to_reshard,)),
    ), names)
    # The store wrote every function boundary the propagation changed: its parses
    # stand for those shardings (no step since touches a function boundary).
    fix_io_shardings(module, None if read is None else read.store)
    verify_step(module, fix_io_shardings.__name__)
    if found.complete:
        # The ops found hold every sharding there is to close: no walk to find them.
        _close_found_shardings(found, erased)
        verify_step(module, export_steps.close_shardings.__name__)
    else:
        run_steps(module, (export_steps.close_shardings,), names)
    if explicit_reshards is not None:
        run_steps(module, (explicit_reshards,), names)
    # No step since the census makes an op dead (the merger's kept copy takes the
    # uses, operand included, of those it erases; an edge sunk without users was
    # already unused), so a complete census without unused ops leaves nothing
    # to erase.
    if not found.complete or found.unused or explicit_reshards is not None:
        run_steps(module, (export_steps.erase_dead_ops,), names)
    if drops_rules:
        run_steps(module, (export_steps.drop_sharding_rules,), names)
