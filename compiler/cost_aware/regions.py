"""Local evaluation of a pin: its neighbourhood cut out as a module of its own.

Re-propagating the whole module for every candidate costs (candidates x
module size), 46x a plain propagation on a 128-layer transformer. A pin
changes shardings near its op first, so above a module size the search
prices a candidate on a *region*: at most ``limit`` ops reached from the
conflict op (and the pinned op) by def-use steps within one block, cut out
(``cut_out``) into a module whose function arguments and results are the
values crossing the cut, closed to the shardings the current state gives
them. Inside, every op starts from its imported sharding (what propagation
starts from) plus the accepted pins in the region. That module is read
without being made (``region_graph``: the region's part of the state's
graph, its ops read through the imported ones a cut would clone) and made
only where a copy of it must be. The region is propagated
with user priorities with and without the candidate and priced by the same
cost model; the difference is the candidate's local gain. A change that
would travel past the cut is priced as a reshard at the cut, so a local gain
errs towards Shardy's choice, and the search verifies on the whole module
every pin it accepts from regions.

Repeated structure (the layers of an unrolled model) has the same
``structure_key`` (read from the graph, before any cutting), which keys a
memo: one evaluation serves every repetition. A repetition priced with another
pin, or in a later state of the search, is priced on the modules cut out for
the first region of its structure (and of its open cut), its pin moved to the
op at the same position there: equal keys cut out to equal modules but for the
ops' numbers.

A closed cut hides a pin whose point is to change what a whole chain of
values settles to: pinning one residual-stream value of an FSDP language
model to the batch axis makes propagation move every activation of the
forward and backward pass off the FSDP axis (3x fewer bytes on the module),
but inside a closed region it only moves a reshard to the cut. So a region
also has a **steady-state price** (``RegionEvaluator.steady_price``): the
region cut out with its *open* cut (``cut_out(..., open_cut=True)``): the
values crossing it carry no sharding, except the real function's own
arguments and results, so they settle with the candidate inside; what the
region costs once the rest of the module has adapted to the pin. It is
only a ranking: the search prices such a candidate on the module before
keeping it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func

from shardc.compiler.cost_aware.candidates import (
    TAG,
    Pin,
    apply_pins,
    closed,
    op_tags,
    ops_by_tag,
    tag_of,
)
from shardc.compiler.cost_aware.explicit import signatures
from shardc.compiler.cost_aware.pricing import (
    PinnedCopies,
    price,
    returned_in_declared_layout,
)
from shardc.compiler.propagation.graph import PropagationGraph, ReadMemo
from shardc.compiler.propagation.values import CostMemo, ModuleValues
from shardc.compiler.sharding.rules import is_bookkeeping
from shardc.compiler.sharding.tensor import TensorSharding, format_sharding
from shardc.dialects.sdy import SHARDING_ATTR

# Ops a region never contains: their results enter it as arguments instead
# (data-flow edges and calls only mean something next to their owner/callee;
# loops and manual computations keep their data-flow edges and bodies whole).
_OUTSIDE = frozenset({"sdy.data_flow_edge", "func.call", "sdy.sharding_group",
                      "stablehlo.while", "stablehlo.case", "stablehlo.if",
                      "sdy.manual_computation", "sdy.named_computation"})


def region_of(reader: ModuleValues, seeds: list[int], limit: int, radius: int) -> list[int]:
    """The ops within the largest def-use distance (at most ``radius``) of ``seeds``
    that fit in ``limit`` ops.

    Breadth first, a whole distance at a time, over operands' producers and
    results' users within the seeds' block; terminators, ``_OUTSIDE`` ops and
    ops whose bodies use outer values stay outside (their values cross the
    cut). Whole distances keep the region the same shape wherever the same
    structure repeats (every layer of a model gets the same region but within
    ``radius`` of the ends), which is what lets one evaluation serve all of
    them. Program order. The graph's alone: kept in ``reader.facts`` (the states
    of one search ask again for the same seeds).
    """
    regions = reader.facts.get("regions")
    if regions is None:
        regions = reader.facts["regions"] = {}
    known = regions.get((*seeds, limit, radius))
    if known is None:
        known = regions[(*seeds, limit, radius)] = tuple(_region_of(reader, seeds, limit,
                                                                    radius))
    return list(known)


def _region_of(reader: ModuleValues, seeds: list[int], limit: int, radius: int) -> list[int]:
    graph = reader.graph
    parent = graph.op_parent[seeds[0]]
    op_parent, value_def, uses = graph.op_parent, graph.value_def, graph.uses
    op_operands, op_results = graph.op_operands, graph.op_results
    # Whether an op may be inside a region (but for its block): the graph's alone.
    eligible = reader.facts.get("region ops")
    if eligible is None:
        eligible = reader.facts["region ops"] = {}
    tags = op_tags(reader.facts, graph)

    def inside(op: int) -> bool:
        if op < 0 or op_parent[op] != parent:
            return False
        known = eligible.get(op)
        if known is None:
            known = eligible[op] = (
                not graph.erased[op] and not graph.op_terminator[op] and bool(op_results[op])
                and graph.op_name[op] not in _OUTSIDE and tags[op] is not None
                and (not graph.op_blocks[op] or _self_contained(graph, op)))
        return known

    chosen = [op for op in dict.fromkeys(seeds) if inside(op)]
    seen = set(chosen)
    level = list(chosen)
    for _ in range(radius):
        following = []
        for op in level:
            neighbours = [value_def[v] for v in op_operands[op]]
            for v in op_results[op]:
                neighbours += [user for user, _ in uses[v]]
            for other in neighbours:
                if other not in seen and inside(other):
                    seen.add(other)
                    following.append(other)
        if len(chosen) + len(following) > limit:
            if len(chosen) == len(seeds):  # a very wide first step: take what fits
                chosen += following[:limit - len(chosen)]
            break
        chosen += following
        level = following
        if not level:
            break
    return sorted(chosen)


def _self_contained(graph, op: int) -> bool:
    """Whether the ops nested in ``op`` use only values defined inside ``op``.

    A reduce or sort body computes on its own arguments and moves with its op;
    a body that uses a value from outside (a ``stablehlo.case`` branch, a
    ``sdy.manual_computation``) cannot be cut out without it.
    """
    own: set[int] = set()
    nested: list[int] = []
    stack = [op]
    while stack:
        current = stack.pop()
        for args, ops in graph.op_blocks[current]:
            own.update(args)
            for inner in ops:
                own.update(graph.op_results[inner])
                nested.append(inner)
                stack.append(inner)
    return all(value in own for inner in nested for value in graph.op_operands[inner])


def _crossing(reader: ModuleValues, ops: list[int],
              sharding: Callable[[int], TensorSharding | None] | None = None):
    """Values entering the region (first use order) and leaving it, with their shardings.

    A value leaves once for its users outside the region, at the sharding the
    current state gives it, and once per ``func.return`` of a ``func.func``
    that returns it, at the function's declared result sharding: the reshard
    to it is a cost the region must see (and a pin may save). ``sharding``:
    ``reader.sharding``, or a memo of it (overlapping regions of one state
    cross at the same values).
    """
    graph, store = reader.graph, reader.store
    if sharding is None:
        sharding = reader.sharding
    members = set(ops)
    value_def, uses = graph.value_def, graph.uses
    entering: dict[int, None] = {}
    leaving: list[tuple[int, TensorSharding | None, bool]] = []  # (value, sharding, returned)
    for op in ops:
        for value in graph.op_operands[op]:
            if value_def[value] not in members:
                entering[value] = None
        for value in graph.op_results[op]:
            outside = [use for use in uses[value] if use[0] not in members]
            if not outside:  # most values: used inside only
                continue
            returned = [(user, k) for user, k in outside if _returns_from_func(graph, user)]
            if len(returned) < len(outside):
                leaving.append((value, sharding(value), False))
            for user, k in returned:
                declared = store.value[store.func_results[graph.op_parent[user]][k]]
                leaving.append((value, declared if declared is not None
                                else sharding(value), True))
    return [(v, sharding(v), False) for v in entering], leaving


def _function_argument(graph, value: int) -> bool:
    """Whether ``value`` is an argument of a ``func.func`` (not of a nested block)."""
    return graph.value_def[value] < 0 and graph.op_name[graph.value_owner[value]] == "func.func"


def _returns_from_func(graph, op: int) -> bool:
    return (graph.op_name[op] == "func.return"
            and graph.op_name[graph.op_parent[op]] == "func.func")


def open_positions(reader: ModuleValues, ops: list[int], crossing=None
                   ) -> tuple[frozenset[int], frozenset[int]]:
    """The positions of the arguments and results of region ``ops`` cut out that an open
    cut leaves without a sharding (``cut_out``): all but the real function's own.
    ``crossing``: ``_crossing(reader, ops)``, when the caller has it."""
    entering, leaving = crossing or _crossing(reader, ops)
    graph = reader.graph
    return (frozenset(k for k, (value, _, _) in enumerate(entering)
                      if not _function_argument(graph, value)),
            frozenset(k for k, (_, _, returned) in enumerate(leaving) if not returned))


def _boundary_attrs(values: list[tuple[int, TensorSharding | None, bool]],
                    fixed=lambda value, returned: True,
                    made: dict[tuple, ir.Attribute] | None = None) -> ir.ArrayAttr:
    """Each crossing value's closed sharding, or none where it is not ``fixed``.

    ``made`` keeps each entry made, by mesh and dimension axes, for the cuts of
    one context: an attribute is uniqued there, so the kept one is the one
    parsing its text again would give.
    """
    if made is None:
        made = {}
    entries = []
    for value, sharding, returned in values:
        key = (None if sharding is None or not fixed(value, returned)
               else (sharding.mesh, tuple([d.axes for d in sharding.dims])))
        entry = made.get(key)
        if entry is None:
            if key is None:
                entry = ir.DictAttr.get({})
            else:
                text = format_sharding(closed(sharding.mesh, key[1]))
                entry = ir.DictAttr.get({SHARDING_ATTR: ir.Attribute.parse(text)})
            made[key] = entry
        entries.append(entry)
    return ir.ArrayAttr.get(entries)


def cut_out(reader: ModuleValues, ops: list[int], sources: dict[int, list[ir.Operation]],
            open_cut: bool = False, crossing=None,
            made: dict[tuple, ir.Attribute] | None = None) -> tuple[ir.Module, frozenset[int]]:
    """The region ``ops`` of ``reader``'s module as a module (see the module docstring),
    and the positions of its results that are results of the real function.

    ``sources`` maps an op number (``TAG``) to the op(s) of that number in the
    module before propagation (``ops_by_tag`` of the imported module, the last
    in walk order counting): each op is cloned from there, so it carries its
    ``sdy.sharding`` as imported (or none), where ``reader``'s module carries
    the propagated one; a copy differs from it only in shardings. With
    ``open_cut`` only the real function's
    arguments and results keep their shardings at the cut; every other crossing
    value is left to propagation (the steady-state price). ``crossing``:
    ``_crossing(reader, ops)``, when the caller has it; ``made``: the boundary
    attributes made for earlier cuts in this context (``_boundary_attrs``).

    The ops are made in program order, each op's operands set in order, the
    return last: as a clone makes them, so the module's use-lists (which order
    propagation's worklist) are those of a clone of it.
    """
    graph = reader.graph
    entering, leaving = crossing or _crossing(reader, ops)
    body = graph.module.regions[0].blocks[0]
    with ir.Location.unknown(graph.module.context):
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            for symbol in body.operations:
                if symbol.operation.name == "sdy.mesh":
                    symbol.operation.clone()
            function = func.FuncOp("main", _boundary_types(graph, entering, leaving))
            entry = function.add_entry_block()

        def fixed(value: int, returned: bool) -> bool:
            return not open_cut or returned or _function_argument(graph, value)

        function.operation.attributes["arg_attrs"] = _boundary_attrs(entering, fixed, made)
        function.operation.attributes["res_attrs"] = _boundary_attrs(leaving, fixed, made)
        mapped: dict[int, ir.Value] = dict(zip((v for v, _, _ in entering), entry.arguments))
        with ir.InsertionPoint(entry):
            for op in ops:
                copy = sources[tag_of(reader, op)][-1].clone()
                operands = copy.operands
                for k, value in enumerate(graph.op_operands[op]):
                    operands[k] = mapped[value]
                for value, result in zip(graph.op_results[op], copy.results):
                    mapped[value] = result
            func.ReturnOp([mapped[v] for v, _, _ in leaving])
    return module, _returned_positions(leaving)


def region_graph(reader: ModuleValues, ops: list[int], sources: dict[int, list[ir.Operation]],
                 crossing=None, made: dict[tuple, ir.Attribute] | None = None, *,
                 conservative: bool = False, memo: ReadMemo | None = None
                 ) -> tuple[PropagationGraph, list[int | None], frozenset[int]]:
    """The graph of the module ``cut_out`` (closed) would make of region ``ops``, its
    ops' numbers (``op_tags``) and the positions of its results that are results of
    the real function, without making that module: the region's part of ``reader``'s
    graph (``PropagationGraph.of_region``), each op read through the op of ``sources``
    a cut would clone, the function and its return made apart, without a body
    (arguments as ``cut_out``'s)."""
    graph = reader.graph
    entering, leaving = crossing or _crossing(reader, ops)
    symbols = reader.facts.get("symbols")
    if symbols is None:
        symbols = reader.facts["symbols"] = [
            op for op, name in enumerate(graph.op_name)
            if name == "sdy.mesh" and graph.op_parent[op] == -1]
    with ir.Location.unknown(graph.module.context):
        function = func.FuncOp("main", _boundary_types(graph, entering, leaving))
        with ir.InsertionPoint(function.add_entry_block()):
            ret = func.ReturnOp([])
        function.operation.attributes["arg_attrs"] = _boundary_attrs(entering, made=made)
        function.operation.attributes["res_attrs"] = _boundary_attrs(leaving, made=made)
    numbers = op_tags(reader.facts, graph)
    tags = [None] * (len(symbols) + 1)  # the symbols and the function carry none
    for op in ops:
        tags += [numbers[p] for p in graph.subtree(op)] if graph.op_blocks[op] else [numbers[op]]
    tags.append(None)  # the return
    region = PropagationGraph.of_region(
        graph, symbols=symbols, function=function.operation, ret=ret.operation,
        arguments=[v for v, _, _ in entering], ops=ops,
        bindings=[sources[numbers[op]][-1] for op in ops],
        returned=[v for v, _, _ in leaving], conservative=conservative, memo=memo)
    return region, tags, _returned_positions(leaving)


def _boundary_types(graph, entering: list, leaving: list) -> tuple[list, list]:
    return ([graph.values[v].type for v, _, _ in entering],
            [graph.values[v].type for v, _, _ in leaving])


def _returned_positions(leaving: list) -> frozenset[int]:
    return frozenset(k for k, (_, _, returned) in enumerate(leaving) if returned)


def _attribute_hashes(op: ir.Operation) -> tuple:
    # Attributes are uniqued in their context: equal hashes, equal attributes. shardc's
    # bookkeeping (the search's numbers, an op's place in jax's order) is none of them.
    try:
        return tuple((name, hash(op.attributes[name])) for name in op.attributes
                     if name != SHARDING_ATTR and not is_bookkeeping(name))
    except TypeError:
        # The bindings cannot read a complex-valued dense constant; the op's printed
        # form stands in (bookkeeping included: such regions share fewer evaluations).
        return (str(op),)


def _body_fingerprint(graph, op: int) -> tuple:
    """The nested ops of ``op`` (a reduce or sort body): names, attributes, operands, types."""
    number: dict[int, int] = {}
    out = []
    stack = [op]
    while stack:
        current = stack.pop()
        for args, ops in graph.op_blocks[current]:
            for arg in args:
                number[arg] = len(number)
            out.append(tuple(graph.value_type_key[a] for a in args))
            for inner in ops:
                out.append((graph.op_name[inner],
                            tuple(number.get(v, -1) for v in graph.op_operands[inner]),
                            tuple(graph.value_type_key[r] for r in graph.op_results[inner]),
                            _attribute_hashes(graph.ops[inner])))
                for result in graph.op_results[inner]:
                    number[result] = len(number)
                stack.append(inner)
    return tuple(out)


def op_fingerprint(reader: ModuleValues, op: int) -> tuple:
    """What an op brings to a region's ``structure_key`` wherever the region cuts:
    name, tag, result types, attributes (uniqued: their hashes compare them) and
    nested bodies."""
    graph = reader.graph
    attributes = (_attribute_hashes(graph.ops[op]),
                  _body_fingerprint(graph, op) if graph.op_blocks[op] else None)
    return (graph.op_name[op], tag_of(reader, op),
            tuple(graph.value_type_key[r] for r in graph.op_results[op]), attributes)


def structure_key(reader: ModuleValues, ops: list[int],
                  imported: dict[int, ir.Attribute | None], accepted: dict[int, Pin],
                  fingerprints: dict[int, tuple] | None = None, crossing=None,
                  numbered: dict[int, tuple] | None = None,
                  interned: dict[tuple, int] | None = None) -> tuple:
    """What decides the prices of region ``ops``, read without cutting it out.

    Per op: its ``op_fingerprint`` but the tag, imported sharding and accepted
    pin (its *body*), then its operands (region position and result index, or
    ``-1`` and argument number), flattened into one tuple of the ops in
    program order; then the crossing values with their shardings. Equal keys
    cut out to equal modules, so one evaluation serves both. ``fingerprints``
    memoises by op its tag and body, for the regions of one ``reader``,
    ``imported`` and ``accepted`` (they overlap); ``crossing`` is
    ``_crossing(reader, ops)``, when the caller has it. ``numbered`` memoises
    ``op_fingerprint`` by op number (``TAG``) for the states of one search, whose
    modules are copies of one module that differ only in their shardings.
    ``interned`` numbers each distinct body: keys made with one such table hold
    the body's number, which hashes and compares at once where the body would
    be hashed whole every time (a tuple does not keep its hash); only keys
    made with the same table compare.
    """
    graph = reader.graph
    if fingerprints is None:
        fingerprints = {}
    position = {op: i for i, op in enumerate(ops)}
    entering, leaving = crossing or _crossing(reader, ops)
    argument = {value: k for k, (value, _, _) in enumerate(entering)}
    value_def, arg_index, op_operands = graph.value_def, graph.value_arg_index, graph.op_operands
    flat: list = []
    append = flat.append
    for op in ops:
        known = fingerprints.get(op)
        if known is None:
            tag = tag_of(reader, op)
            found = None if numbered is None or tag is None else numbered.get(tag)
            if found is None:
                found = op_fingerprint(reader, op)
                if numbered is not None and tag is not None:
                    numbered[tag] = found
            name, _, results, attributes = found
            start = imported.get(tag)
            pin = accepted.get(tag)
            body = (name, results, attributes, None if start is None else hash(start),
                    pin and pin.key()[1:])
            if interned is not None:
                body = interned.setdefault(body, len(interned))
            known = fingerprints[op] = (tag, body)
        operands = op_operands[op]
        append(known[1])
        append(len(operands))
        for value in operands:
            k = argument.get(value)
            if k is None:  # defined inside the region
                append(position[value_def[value]])
                append(arg_index[value])
            else:
                append(-1)
                append(k)
    types = graph.value_type_key
    crossing = (tuple([(types[v], s) for v, s, _ in entering]),
                tuple([(position[value_def[v]], arg_index[v], s, returned)
                       for v, s, returned in leaving]))
    return tuple(flat), crossing


def imported_shardings(module: ir.Operation, tagged: dict[int, list[ir.Operation]] | None = None
                       ) -> dict[int, ir.Attribute | None]:
    """Each numbered op's ``sdy.sharding`` as imported (before any propagation);
    ``tagged``: ``ops_by_tag(module)``, where the caller has it."""
    found: dict[int, ir.Attribute | None] = {}
    if tagged is not None:
        for tag, ops in tagged.items():
            attributes = ops[-1].attributes  # the last in walk order, as the walk finds it
            found[tag] = attributes[SHARDING_ATTR] if SHARDING_ATTR in attributes else None
        return found

    def visit(op: ir.Operation) -> ir.WalkResult:
        if TAG in op.attributes:
            tag = ir.IntegerAttr(op.attributes[TAG]).value
            found[tag] = op.attributes[SHARDING_ATTR] if SHARDING_ATTR in op.attributes else None
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


@dataclass(frozen=True)
class LocalPrice:
    """A region's predicted bytes and memory peak without and with one candidate."""

    key: tuple  # equal for candidates that are the same pin in the same structure
    base_bytes: int
    base_memory: int
    bytes: int
    memory: int

    @property
    def gain(self) -> int:
        return self.base_bytes - self.bytes


@dataclass
class _Region:
    key: int  # its structure_key's number: equal for repetitions of one structure
    ops: list[int]
    tags: list[int | None]  # op numbers, in program order
    crossing: tuple  # ``_crossing``: the values entering and leaving it
    reader: ModuleValues  # the state it is cut out of, with ``accepted`` pinned
    accepted: list[Pin]
    # Cut out when first evaluated (its copies with pins): closed, and with an open cut
    # (steady-state prices).
    module: PinnedCopies | None = None
    returns: frozenset[int] = frozenset()  # result positions the real function returns
    open_module: PinnedCopies | None = None
    # The region whose cut-out modules serve this one, None for itself: the first of its
    # structure and open cut (``RegionEvaluator._region``); its ops are numbered
    # ``cut.tags``. (Not itself: a region referring to itself would be a cycle.)
    first: _Region | None = None
    # What was kept of its copies' price without a candidate (``ModuleValues.priced``), by
    # ``open_cut``: the candidates are priced again only where they differ.
    priced: dict[bool, dict] = field(default_factory=dict)

    @property
    def cut(self) -> _Region:
        return self.first or self


class RegionEvaluator:
    """Prices candidates on regions (``region_of``), memoised by structure.

    ``set_state`` names the current propagated state and its accepted pins;
    ``price_pin`` then prices a candidate around some seed ops, and
    ``steady_price`` the same with the region's cut open (see the module
    docstring). A candidate's bytes include ``returned_in_declared_layout``
    for the region's ops it changes (compared by position with the region's
    own baseline). ``count`` counts the region propagations of both.
    ``tagged``: ``ops_by_tag(imported)``, where the caller has it.
    """

    def __init__(self, imported: ir.Operation, *, limit: int, radius: int, conservative: bool,
                 costs: CostMemo | None = None,
                 tagged: dict[int, list[ir.Operation]] | None = None):
        if tagged is None:
            tagged = ops_by_tag(imported)
        self.imported = imported_shardings(imported, tagged)
        self.sources = tagged  # what regions are cut out from (``cut_out``)
        self.limit = limit
        self.radius = radius
        self.conservative = conservative
        # Regions of one module read the same rules and shardings, and the cost model
        # finds the same at most of their ops, as in the module's own copies (whose
        # memo ``costs`` may be).
        self.costs = costs if costs is not None else CostMemo(ReadMemo())
        self.count = 0  # region propagations run (memo misses)
        self.steady_count = 0  # of which with the cut open (steady-state prices)
        # Steady-state prices propagated or ruled out by a bound (``bounded``), each once.
        self.steady_charged = 0
        self._bounded: set[tuple] = set()  # the keys of those ruled out
        self._memo: dict[tuple, tuple[int, int, tuple]] = {}
        self._regions: dict[tuple[int, ...], _Region] = {}
        # structure_key -> its number: a key is a large tuple, and a tuple hashes all it
        # holds again every time, so the memo's keys hold its number instead.
        self._structures: dict[tuple, int] = {}
        self._reader: ModuleValues | None = None
        self._accepted: list[Pin] = []
        self._fingerprints: dict[int, tuple] = {}  # ``structure_key``'s memo, of ``_reader``
        self._shardings: dict[int, TensorSharding | None] = {}  # ``_reader.sharding``'s memo
        # ``structure_key``'s numbers of op bodies, for every state.
        self._bodies: dict[tuple, int] = {}
        # ``op_fingerprint`` by op number, for every state (``structure_key``'s ``numbered``).
        self._numbered: dict[int, tuple] = {}
        self._made: dict[tuple, ir.Attribute] = {}  # ``cut_out``'s boundary attributes
        # (structure number, open cut's positions) -> the first region of that structure:
        # equal structures cut out to equal modules but for the op numbers, so a region
        # of a later state is priced on the modules of an earlier one (``_Region.cut``).
        self._cuts: dict[tuple, _Region] = {}

    def set_state(self, reader: ModuleValues, accepted: list[Pin]) -> None:
        """Cut regions out of ``reader`` from now on, with ``accepted`` pinned. The regions
        found in the state it already has (a round whose verification kept nothing) are
        kept: they are those the same reader and pins give again."""
        if reader is self._reader and list(accepted) == self._accepted:
            return
        self._reader, self._accepted = reader, list(accepted)
        self._regions.clear()
        self._fingerprints.clear()
        self._shardings.clear()

    def _region(self, seeds: tuple[int, ...]) -> _Region:
        if seeds not in self._regions:
            reader = self._reader
            ops = region_of(reader, list(seeds), self.limit, self.radius)
            accepted = {pin.op: pin for pin in self._accepted}
            crossing = _crossing(reader, ops, self._sharding)
            key = structure_key(reader, ops, self.imported, accepted, self._fingerprints,
                                crossing, self._numbered, self._bodies)
            key = self._structures.setdefault(key, len(self._structures))
            region = _Region(key, ops, [self._fingerprints[op][0] for op in ops], crossing,
                             reader, self._accepted)
            first = self._cuts.setdefault((key, open_positions(reader, ops, crossing)), region)
            if first is not region:
                region.first = first
            self._regions[seeds] = region
        return self._regions[seeds]

    def _sharding(self, value: int) -> TensorSharding | None:
        """``sharding(value)`` in the current state, read once."""
        shardings = self._shardings
        if value in shardings:
            return shardings[value]
        sharding = shardings[value] = self._reader.sharding(value)
        return sharding

    def _key(self, region: _Region, pin: Pin | None, open_cut: bool = False) -> tuple:
        if pin is None:
            return (region.key, None, open_cut)
        position = region.tags.index(pin.op) if pin.op in region.tags else -1
        return (region.key, position, *pin.key()[1:], open_cut)

    def key_of(self, seeds: tuple[int, ...], pin: Pin) -> tuple:
        """Equal for candidates that are the same pin in the same structure (one price)."""
        return self._key(self._region(seeds), pin)

    def is_cached(self, seeds: tuple[int, ...], pin: Pin, open_cut: bool = False) -> bool:
        """Whether ``price_pin`` (``steady_price`` with ``open_cut``) would answer from
        the memo (no region propagation)."""
        region = self._region(seeds)
        key = self._key(region, pin, open_cut)
        return (self._key(region, None, open_cut) in self._memo
                and (key in self._memo or key in self._bounded))

    def _module(self, region: _Region, open_cut: bool) -> PinnedCopies:
        """The region cut out (with its cut open or closed) and the accepted pins in it,
        as the copies the candidates are priced on: those of the first region of its
        structure (``_Region.cut``, whose op numbers they carry).

        The open cut's module is the closed cut's but for the shardings of the function
        arguments and results it leaves open: its copies are propagated on the closed
        cut's read (``PinnedCopies.opened``), and it is cut out only if one must be made.
        """
        region = region.cut
        if region.module is None:
            # Its graph is the region's part of the state's graph: the module is cut out
            # only if a copy of it must be made.
            graph, tags, region.returns = region_graph(
                region.reader, region.ops, self.sources, region.crossing, self._made,
                conservative=self.conservative, memo=self.costs.reads)
            region.module = PinnedCopies(None, self.conservative, self.costs, graph=graph,
                                         tags=tags, pins=region.accepted,
                                         make=self._cutter(region, open_cut=False))
        if not open_cut:
            return region.module
        if region.open_module is None:
            region.open_module = region.module.opened(
                *open_positions(region.reader, region.ops, region.crossing),
                self._cutter(region, open_cut=True))
        return region.open_module

    def _cutter(self, region: _Region, open_cut: bool) -> Callable[[], ir.Module]:
        """What cuts ``region`` out (``cut_out``) with its accepted pins, when called.

        It is kept by the region's copies: it holds neither the region nor this
        evaluator, or they would live in a cycle, freed only by the cyclic collector
        (scanning all the search allocated) instead of when dropped.
        """
        reader, ops, crossing, accepted = region.reader, region.ops, region.crossing, \
            region.accepted
        sources, made = self.sources, self._made

        def cut() -> ir.Module:
            module, _ = cut_out(reader, ops, sources, open_cut=open_cut, crossing=crossing,
                                made=made)
            apply_pins(module.operation, accepted)
            return module

        return cut

    def _evaluate(self, region: _Region, pin: Pin | None,
                  open_cut: bool = False) -> tuple[int, int, tuple]:
        """``(bytes, memory peak, signatures by position)`` of the region with ``pin`` (no
        signatures for a region that returns nothing of the real function's)."""
        key = self._key(region, pin, open_cut)
        if key not in self._memo:
            base = None if pin is None else self._evaluate(region, None, open_cut)
            self.count += 1
            self.steady_count += open_cut
            self.steady_charged += open_cut and key not in self._bounded
            copies = self._module(region, open_cut)
            cut = region.cut  # whose op numbers the copies carry
            pins = []
            if pin is not None:
                pins = [replace(pin, op=cut.tags[region.tags.index(pin.op)])]
            # Only priced and dropped: its shardings need not reach its IR.
            reader = copies.propagated(pins, write=False)
            # A candidate is priced again only where it differs from the region without one.
            reader.priced_from = None if pin is None else cut.priced.get(open_cut)
            cost, peak = price(reader)
            if pin is None:
                cut.priced[open_cut] = reader.priced
            by_position = ()
            # The changed ops are asked for only where the region returns a value of the
            # real function (``returned_in_declared_layout``): regions of one structure
            # return alike, so a region that returns none needs no signatures.
            if cut.returns:
                by_tag = signatures(reader)
                by_position = tuple(by_tag.get(tag) for tag in cut.tags)
                if base is not None:
                    changed = {tag for tag, now, then in zip(cut.tags, by_position,
                                                             base[2]) if now != then}
                    cost += returned_in_declared_layout(reader, changed, cut.returns)
            self._memo[key] = (cost, peak, by_position)
        return self._memo[key]

    def price_pin(self, seeds: tuple[int, ...], pin: Pin, open_cut: bool = False
                  ) -> LocalPrice:
        """The region around ``seeds`` priced without and with ``pin`` (``open_cut``:
        its steady-state price, ``steady_price``)."""
        region = self._region(seeds)
        base = self._evaluate(region, None, open_cut)
        with_pin = self._evaluate(region, pin, open_cut) if pin.op in region.tags else base
        return LocalPrice(self._key(region, pin), *base[:2], *with_pin[:2])

    def steady_price(self, seeds: tuple[int, ...], pin: Pin) -> LocalPrice:
        """``price_pin`` with the region's cut open: what the region costs without and
        with ``pin`` once the values crossing the cut have settled with it."""
        return self.price_pin(seeds, pin, open_cut=True)

    def steady_gain_bound(self, seeds: tuple[int, ...], pin: Pin) -> int:
        """An upper bound of ``steady_price(seeds, pin).gain``, from the region priced
        without ``pin`` alone: a region's predicted bytes are a sum of collectives'
        bytes, none negative, so a candidate saves at most what the region costs
        without it."""
        return self._evaluate(self._region(seeds), None, open_cut=True)[0]

    def bounded(self, seeds: tuple[int, ...], pin: Pin) -> None:
        """``pin``'s steady-state price is not needed (``steady_gain_bound``): charged to
        ``steady_charged`` as if it were propagated, and ``is_cached`` from now on, so
        that a budget of steady-state propagations considers the same candidates with
        the bound as without it."""
        region = self._region(seeds)
        key = self._key(region, pin, open_cut=True)
        if pin.op in region.tags and key not in self._memo and key not in self._bounded:
            self._bounded.add(key)
            self.steady_charged += 1
