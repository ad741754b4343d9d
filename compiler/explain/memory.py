"""Per-device memory before compiling: arguments, outputs and the live peak of temporaries.

``estimate_memory(module)`` reads a propagated module (every value has its
final sharding) and adds up per-device shard bytes, a dimension its axes do
not divide counting padded like XLA pads it:

* arguments: the main function's arguments;
* outputs: its results, at their result shardings (plus XLA's table of
  one pointer per output when there are several);
* temporaries: a liveness walk over the main function in program order. A
  value is allocated by the op defining it (from the block's start when the
  op reads no buffer the block computes: XLA's scheduler runs such ops
  first, except a loop's initial value) and freed after its last use (a
  use inside a nested region counts at the op owning the region; a body's own
  peak is added while its op runs: a loop body's returned values live in the
  carries, and a manual computation's body, which XLA inlines, holds its
  results and frees an operand after its last reader inside; a loop body's
  ops computed from loop-invariant values only run before the loop, their
  buffers live through it: ``hoisted``, XLA's loop-invariant code motion, which also
  carries a batched gather's or scatter's loop-invariant indices concatenated with
  their batch iotas; a batched scatter's other indices are joined with those
  iotas in an array of their own while it runs, no constant where split). Values XLA
  never materialises are skipped: constants, and values of *fusible* ops
  (elementwise, broadcasts, reshapes, converts, iota, slices, selects) whose
  users are all fusible ops, reductions or dynamic-update-slices, since XLA
  fuses such producers into their consumer, unless
  several ops read one that is expensive (XLA does not duplicate exp, tanh,
  rsqrt, ...) or feeds a reduction, directly or, when XLA:CPU hands the
  reduction to YNNPACK (an f32 sum/max/min of at least 4096 elements per
  device), through a chain of fused ops each read once (an RMS norm's
  ``x * x``); a value's users are seen through the sharding constraints that
  pass it on unmoved (a constrained ``silu(g) * u`` read by dots is a buffer);
  a transpose read only by dots is
  folded into them; chlo's elementwise ops (``square``, ``erf``) fuse alike. A buffer is freed after the last op reading it, a fused reader
  reading it where its own readers run. Values returned from the function
  (and the ops producing them) live in the output buffers, not in
  temporaries, and a temporary that fits in a non-aliased output buffer
  before that output is written is placed there (XLA's buffer assigner
  reuses output allocations, largest values first, smallest allocation first).
* aliasing: donated arguments whose buffers outputs reuse (``aliasing``).
* reshard buffers: an operand resharded to what its op needs (gathered,
  all-to-all'ed, or sliced for a non-fusible op) is one buffer per (value,
  target sharding), live from its first to its last consumer (XLA reuses it);
  an argument's reshard (also through sharding constraints on it) is live
  from the block's start (XLA schedules it first); a gather along a
  dimension with a longer one before it adds a transposed copy of the
  gathered buffer (none where a transpose, or a reshape sliced again or read
  by transposes, reads it: XLA writes the gather in that reader's layout),
  and on XLA:CPU an all-to-all adds the pieces it
  concatenates, and a scatter sliced on its operand's indexed dims writes its
  resharded indices less each device's offset: both live with the reshard's
  buffer after the op before its first consumer, the consumer reading the
  last one written. Explicit reshards that move data are buffers too;
  implicit reshards of returned values and call operands are live while
  their op runs;
* transposed copies XLA's CPU kernels make of batched-dot operands whose batch
  dimensions are not leading and of convolution operands/results not in
  ``b01f_01io->b01f``, from when the operand exists to the consumer; a
  convolution reads the copy, not the operand (a fusible operand read only so,
  a kernel's reverse, is computed in its copy), as an op reading a reshard an
  earlier op made reads that buffer;
* halo windows: a slice of a dimension sharded in both its operand and its
  result reads the array XLA's halo exchange concatenates (the neighbours'
  halos and the part of its own shard read: ``halos.exchanged_window_bytes``),
  each reader fusing its shard's dynamic-slice of it; XLA:CPU writes that
  concatenate as a kernel of its own (``PlatformRules.writes_halo_windows``), so
  where elementwise ops read the slice its result is a buffer of the window's
  bytes;
* duplicated producers (``duplication``): a cheap fusible value (one large
  operand) that a convolution or a loop (its initial value) reads is kept for
  those only; the ops that can fuse it compute it again, reading its operands;
* fused code copies (``duplication.CodeCopies``): a fusible value its kernel would
  emit more than 15 times (read through that many distinct index computations:
  slices, pads, broadcasts of it, each level of a tree of them multiplying) is a
  buffer, and so is a pad read by more than one kernel or more than once in one
  (XLA:CPU emits its code in blocks of its own): an ``associative_scan``'s
  interleaving pads, every level's;
* outer products (``simplified``): a dot contracting no dimension is a multiply
  of broadcasts to XLA, fused with its readers as any elementwise op; a reduce
  reducing no element (over no dimension or unit ones) is a reshape; a case on a
  constant index is the branch it selects (the others hold nothing), and so is one
  whose index folds once a selected branch's result is read through;
* pads: an update written at constant indices into a broadcast of a constant
  number is a pad of the update to XLA, written where the update runs (no zeros
  made first thing: ``LivenessWalker.padded``);
* a producer YNNPACK's reduction fusion cannot take (a dynamic-slice, a reverse,
  a select) feeding an offloaded f32 reduction is a buffer of its own loop fusion;
* ``jax.checkpoint`` outside loops: on XLA:CPU, which removes optimization barriers
  before CSE, the recomputation merges into the forward (``merged``; a reduction
  by its body, so a layer norm's or softmax's sums and all after them merge), whose
  values then live until the backward reads them, and a value read through a
  barrier is the barrier's operand (one gathered or converted copy of a weight);
* XLA:CPU's expansions: a select-and-scatter (a max pool's gradient) holds one
  s32 iota per dimension and the reduce-window's results while it runs;
* tables of pointers: XLA:CPU writes a tuple-shaped value (a loop's carries, a
  case's result and its branches' operands, a host callback's or a sort's
  results, a combined all-reduce's) as a table of 8-byte pointers, each in an
  allocation of its own laid after the arrays' heap (``tables``); XLA:TPU too,
  each table one 512-byte buffer 16 KiB from the next;
* staging (XLA:TPU, ``staging``): where every array of the program fits in on-chip
  memory, none is in HBM; the HBM temporaries are the tables of each argument's
  prefetch and each multi-output fusion, and the scalars of each reduction's
  per-element computation;
* partial sums: an op whose result is sharded over axes it also reduces
  over all-reduces its partial sums unsliced and slices them in each reader,
  so its buffer is the result without those axes, live while it is read
  (XLA:TPU reduce-scatters them: the shard is the buffer, the partial sums
  live while the op runs, never whole in a windowed loop's);
* ops XLA's partitioner does not partition (an fft, a top_k on XLA:CPU:
  ``op_comm.xla_replicates``) gather each operand whole and write their result
  whole, its readers reading their slice of it;
* all-reduces over the same axes that do not depend on one another are
  combined, whatever all-reduces over other axes run between them: their
  results stay live until the last of them;
* an all-reduce in a type the platform widens (XLA:CPU all-reduces bf16 in f32):
  its operand and result are buffers of the wide type, the result one that an
  output's allocation may hold, unless an output is computed from it element by
  element (the f32 result then sits in that output's allocation);
* in place: ``while`` results reuse their carries (a carry the body returns
  unchanged is its init value; a returned result's initial value may sit in the
  output's allocation), ``dynamic_update_slice``/``scatter`` their
  dying operand, and a reshape shares its operand's buffer;
* an all-reduce writes a buffer apart from its operand's, right after the op
  (after a combined one's last member): between that op and the next, as XLA
  schedules it, once the op's dying operands are freed and before the next
  op's result is written (``liveness.STEP``: two positions per op), unless the value's one reader chain
  writes a same-sized output not aliased with a donated argument (XLA puts
  the operand in that output's allocation);
* dots in a wider type: on XLA:CPU a bf16 dot's operands are converted to f32
  buffers (one per value, kept for all its dots), its f32 result is live
  while it runs (``PlatformRules.dot_computed_as``); an operand the dot reads
  resharded is converted once resharded (the narrow reshard freed then); in a
  loop body the convert of a slice of a loop-invariant input is hoisted: the
  whole input in f32 while the loop runs (behind ``jax.checkpoint``'s
  optimization barrier too: XLA expands the barrier first);
* gathers and scatters reshard their operands as XLA's gather/scatter handler
  plans them (``cost.indexed``, as ``comm_report`` prices them); a result it
  all-to-alls to the declared sharding is a buffer the all-to-all writes, on
  XLA:CPU its pieces concatenated and copied into the result's layout while
  the copy is made;
* on chip (XLA:TPU, ``on_chip``): the buffers its memory-space assignment keeps
  in VMEM are not HBM temporaries: a loop body's while they fit, a gathered
  operand, a buffer read only by the op after its writer;
* the heap: temporaries are packed as XLA's buffer assigner packs them
  (``heap``: best fit, largest or longest-lived first, offsets aligned to
  64 bytes on XLA:CPU), so ``temp`` is the heap's size (at least the live peak)
  and the tables of pointers after it; a loop body's buffers are packed one by
  one in the loop's place, as XLA's heap simulator runs over the program
  flattened (``Interval.order``; a platform keeping buffers on chip packs the
  body's peak as one block).

Each rule was read off XLA's buffer assignment (``--xla_dump_to``).

The figures compare with XLA's ``Compiled.memory_analysis()`` (argument,
output, temp and alias bytes; ``net_bytes`` with arg + out + temp - alias):
``bench/memory_estimate.py`` states the error per benchmark and zoo program.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

from jaxlib.mlir import ir

from shardc.compiler.cost.fusion import FUSIBLE
from shardc.compiler.cost.platforms import active_rules, platform_rules, predicting_for
from shardc.compiler.explain.aliasing import Alias, donations, find_aliases
from shardc.compiler.explain.heap import heap_bytes
from shardc.compiler.explain.liveness import (
    STEP,
    Buffer,
    Interval,
    LivenessWalker,
    loc_text,
)
from shardc.compiler.explain.on_chip import live_peak, on_chip
from shardc.compiler.explain.simplified import forwarded
from shardc.compiler.explain.staging import per_element_bytes, staged_tables
from shardc.compiler.propagation.values import ModuleValues

_POINTER_BYTES = 8
_BARRIER = "stablehlo.optimization_barrier"


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-device bytes of one program, before compiling.

    ``alias_bytes`` are the donated arguments' bytes that results reuse
    (``aliases`` says which), so ``net_bytes`` compares with XLA's
    ``argument + output + temp - alias`` from ``memory_analysis()``.
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_op: str | None
    peak_loc: str | None
    largest: tuple[Buffer, ...]
    alias_bytes: int = 0
    aliases: tuple[Alias, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries (what ``memory_analysis`` adds up too)."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes

    @property
    def net_bytes(self) -> int:
        """The total less the aliased bytes, counted both as argument and as output."""
        return self.total_bytes - self.alias_bytes

    def compare(self, stats) -> dict[str, float | None]:
        """Ratios estimate / XLA per field of a ``memory_analysis()`` result (None if 0)."""
        total = (stats.argument_size_in_bytes + stats.output_size_in_bytes
                 + stats.temp_size_in_bytes)
        pairs = {
            "argument": (self.argument_bytes, stats.argument_size_in_bytes),
            "output": (self.output_bytes, stats.output_size_in_bytes),
            "temp": (self.temp_bytes, stats.temp_size_in_bytes),
            "alias": (self.alias_bytes, stats.alias_size_in_bytes),
            "total": (self.total_bytes, total),
            "net": (self.net_bytes, total - stats.alias_size_in_bytes),
        }
        return {k: (mine / xla if xla else (1.0 if mine == 0 else None))
                for k, (mine, xla) in pairs.items()}

    def format_text(self) -> str:
        """A short report: the figures, the aliased buffers, the peak, the largest buffers."""
        lines = [f"arguments   {self.argument_bytes:>12} bytes/device",
                 f"outputs     {self.output_bytes:>12} bytes/device",
                 f"temporaries {self.temp_bytes:>12} bytes/device (live peak)",
                 f"aliased     {self.alias_bytes:>12} bytes/device (donated arguments reused "
                 "by outputs)",
                 f"total       {self.net_bytes:>12} bytes/device (less aliased)"]
        for alias in self.aliases:
            name = f" {alias.path}" if alias.path else ""
            lines.append(f"  argument {alias.argument}{name} -> result {alias.result} "
                         f"({alias.bytes_per_device} bytes)")
        if self.peak_op:
            lines.append(f"peak at {self.peak_op} ({self.peak_loc or 'unknown location'})")
        for buffer in self.largest:
            lines.append(f"  {buffer.bytes_per_device:>10}  {buffer.name:<8} {buffer.op} "
                         f"({buffer.loc or '?'})")
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The estimate as JSON."""
        data = asdict(self)
        data["total_bytes"] = self.total_bytes
        data["net_bytes"] = self.net_bytes
        return json.dumps(data, indent=1)


def _main(values: ModuleValues) -> int:
    funcs = values.funcs
    return funcs.get("main", next(iter(funcs.values()), -1))


def estimate_memory(module: ir.Operation, *, top: int = 5,
                    arg_names: tuple[str, ...] | None = None,
                    platform: str = "cpu") -> MemoryEstimate:
    """The estimate for an already propagated ``module`` (see the module docstring),
    every buffer laid out as on ``platform`` (``cost.platforms``: XLA:TPU tiles them).

    ``arg_names`` (jax's names of the argument leaves) label the aliased buffers.
    """
    return estimate_memory_of(ModuleValues(module, missing_as_replicated=True), top=top,
                              arg_names=arg_names, platform=platform)


def estimate_memory_of(values: ModuleValues, *, top: int = 5,
                       arg_names: tuple[str, ...] | None = None,
                       platform: str = "cpu") -> MemoryEstimate:
    """``estimate_memory`` of a propagated module already read (``values``, read with
    ``missing_as_replicated``), which it leaves as it was."""
    with predicting_for(platform_rules(platform)):
        return _estimate(values, top, arg_names)


def _estimate(values: ModuleValues, top: int,
              arg_names: tuple[str, ...] | None) -> MemoryEstimate:
    walker = LivenessWalker(values)
    graph = walker.graph  # as XLA's CSE leaves it
    func = _main(values)
    if func < 0 or not graph.op_blocks[func]:
        return MemoryEstimate(0, 0, 0, None, None, ())
    args, ops = graph.op_blocks[func][0]
    arguments = [walker.slot(a) for a in args]
    ret = ops[-1]
    results = values.store.func_results.get(func, [])
    outputs = [walker.slot(value, values.store.value[results[k]] if k < len(results) else None)
               for k, value in enumerate(graph.op_operands[ret])]
    output_bytes = sum(o.bytes_per_device for o in outputs)
    if len(outputs) > 1:
        # XLA's tuple of outputs: a table of pointers, a buffer as the platform lays out.
        output_bytes += active_rules().buffer_bytes((len(outputs),), _POINTER_BYTES)
    aliases = find_aliases(donations(graph.ops[func]), arguments, outputs, arg_names)
    walker.aliased_outputs = {alias.result for alias in aliases}
    returned = set(graph.op_operands[ret])
    # The op that produces a result writes it straight into the output buffer.
    producers = {k: walker.root(value) for k, value in enumerate(graph.op_operands[ret])}
    returned.update(producers.values())
    intervals: list[Interval] = []
    walker.peak(ops, returned, intervals)
    position = {op: STEP * i for i, op in enumerate(ops)}
    intervals.extend(_copied_donations(walker, ops, args, aliases, producers, position, returned))
    slots = []
    donor = {alias.result: args[alias.argument] for alias in aliases}
    reads: dict[int, int] = {}
    # an output an op reading only arguments computes is written first thing: XLA's
    # scheduler runs such ops before the rest (``LivenessWalker.unanchored``)
    early = walker.unanchored(ops)
    for k, value in producers.items():
        owner = graph.value_def[value]
        if owner < 0:
            continue
        writer = walker.top_user(owner, ops[0])
        opens = -1  # an output's allocation is free from the start
        if k in donor:
            # a donated argument's, once its last reader has run
            opens = walker.last_read(donor[k], ops[0], position, returned, 0, reads)
        slots.append((outputs[k].bytes_per_device, opens,
                      0 if writer in early else position.get(writer, 0),
                      walker.read_in_place(value)))
    packed = _place_in_outputs(intervals, _flattened(intervals)[0], slots)
    inside = {id(iv) for iv in packed}
    heaped = [iv for iv in intervals if id(iv) not in inside]
    rules = active_rules()
    walker.tables.update(staged_tables(walker, args, ops))
    chip = heaped if rules.stages_in_vmem and _all_fit(heaped, rules.on_chip_bytes) \
        else on_chip(heaped, rules.on_chip_bytes, STEP * len(ops), body=False, step=STEP)
    heaped = _shared([iv for iv in heaped if all(iv is not c for c in chip)])
    flat, positions = _flattened(heaped)
    live, at = live_peak(flat, len(positions))
    peak_op = ops[positions[at] // STEP] if live else -1
    temp = _stacked(heap_bytes([(iv.start, iv.end, iv.size) for iv in flat],
                               rules.heap_alignment),
                    walker.tables.values(), rules.heap_alignment)
    temp += per_element_bytes(walker, ops)
    inside = {id(iv.buffer) for iv in (*packed, *chip) if iv.buffer is not None}
    kept = [b for b in walker.buffers if id(b) not in inside]
    largest = tuple(map(walker.described,
                        sorted(kept, key=lambda b: -b.bytes_per_device)[:top]))
    return MemoryEstimate(sum(a.bytes_per_device for a in arguments), output_bytes, temp,
                          graph.op_name[peak_op] if peak_op >= 0 else None,
                          loc_text(graph.ops[peak_op]) if peak_op >= 0 else None, largest,
                          sum(a.bytes_per_device for a in aliases), aliases)


def _all_fit(intervals: list[Interval], capacity: int) -> bool:
    """Whether all of ``intervals`` fit in ``capacity`` bytes of on-chip memory at once,
    the on-chip bytes of loop bodies among them too: XLA:TPU's memory-space assignment
    then holds every array there (``staging``)."""
    flat, moments = _flattened([replace(iv, size=iv.size + iv.on_chip) for iv in intervals])
    return live_peak(flat, len(moments))[0] <= capacity


def _stacked(heap: int, tables: Iterable[int], alignment: int) -> int:
    """The temporaries' allocation: the arrays' heap, then each table of pointers
    of a tuple-shaped value in bytes of its own.

    XLA's buffer assigner gives every tuple-shaped buffer an allocation of its
    own, shared with nothing (``BufferAssigner::AssignSingleHloBuffer``), then
    lays the temporary allocations end to end, each at an aligned offset
    (``BufferAssignment::CombineTempAllocations``): diffrax_neural_ode's arrays
    take 8064 bytes, its 43 tables, smallest first, the bytes up to 12880."""
    top = heap
    for size in sorted(n for n in tables if n):
        top = -(-top // alignment) * alignment + size
    return top


def _shared(intervals: list[Interval]) -> list[Interval]:
    """``intervals`` with each buffer written over a dying operand's
    (``Interval.over``) merged into that buffer where both are in the heap: XLA's
    heap simulator gives the two one offset (mlp_megatron's bias and gelu fusion
    over the first dot's output)."""
    heaped = {id(iv) for iv in intervals}
    merged: dict[int, Interval] = {}  # an interval's id -> the one holding it
    kept = []
    for iv in sorted(intervals, key=lambda iv: iv.order()[0]):
        holder = merged.get(id(iv.over)) if iv.over is not None and id(iv.over) in heaped \
            else None
        if holder is None or holder.size != iv.size:
            holder = replace(iv)
            kept.append(holder)
        elif iv.within is not None:
            # a loop body's: the body's moments ordered within the loop's
            holder.within = (holder.within[0], max(holder.within[1], iv.within[1]))
        else:
            holder.end = max(holder.end, iv.end)
        merged[id(iv)] = holder
    return kept


def _flattened(intervals: list[Interval]) -> tuple[list[Interval], list[int]]:
    """``intervals`` on one line of moments, a loop body's buffers in the loop's place
    (``Interval.order``), and the block position of each moment."""
    keys = sorted({key for iv in intervals for key in iv.order()})
    rank = {key: k for k, key in enumerate(keys)}
    flat = []
    for iv in intervals:
        first, last = iv.order()
        flat.append(Interval(rank[first], rank[last], iv.size, None))
    return flat, [key[0] for key in keys]


def _copied_donations(walker: LivenessWalker, ops: list[int], args: list[int],
                      aliases: tuple[Alias, ...], producers: dict[int, int],
                      position: dict[int, int], returned: set[int]) -> list[Interval]:
    """The copies XLA makes of donated arguments still read after their output is
    written.

    An output aliased with a donated argument is written into the argument's
    buffer, so XLA's copy insertion copies the argument first unless the
    kernel writing that output depends on every other kernel reading it (an
    op fused into its readers reads it where they run): copy insertion orders
    kernels by their dependencies, not as listed (jmp's loss-scale skip: the
    parameters' fusions compute the momentum again from the donated one, and
    the momentum's own update does not wait for them: ``copy.25 =
    copy(param.9)``). A combined all-reduce is one op: whatever reads one of
    its sums depends on every member (a data-parallel step's last weight:
    its input gradient's dot reads it, and its update waits for the
    all-reduce that sums the earlier weights' gradients with its own: no
    copy). An output XLA's simplifier makes the argument itself (a frozen
    parameter's ``table + 0``) writes nothing over it. The copy lives from
    the start to the last kernel reading it, the writer aside (it updates the
    argument in place: nnx_seq_remat_filters' copy.54, live from the
    parameters to the backward's last dot reading it, 67-93 of 348). Seen
    in optax_lookahead_inject:
    the slow parameters' update reads the fast parameters, donated and
    updated before it
    (``copy.86 = copy(param.5)`` and its kind, live until the slow update);
    penzai_named_lm's backward dots read weights whose updates come later:
    no copy.
    """
    if not aliases:
        return []
    graph = walker.graph
    copies = []
    kernels: dict[int, set[int]] = {}
    # a combined all-reduce runs once every member has: whatever reads one
    # member's sum depends on all of them
    groups: dict[int, set[int]] = {}
    for value, at in walker.combined(ops).items():
        groups.setdefault(at, set()).add(graph.value_def[value])
    together = {member: group for group in groups.values() for member in group}
    for alias in aliases:
        writer = graph.value_def[producers[alias.result]]
        if writer < 0 or forwarded(graph, producers[alias.result]) == args[alias.argument]:
            continue  # the output is the argument, nothing written over it
        writer = walker.top_user(writer, ops[0])
        readers = _kernels_reading(walker, args[alias.argument], ops[0], position, returned)
        if _reached(walker, writer, ops[0], position, readers, kernels, together):
            continue
        # made first thing; the writer updates the argument in place, the others
        # read the copy
        last = max(position[r] for r in readers if r != writer)
        copies.append(Interval(0, last, walker.aligned(alias.bytes_per_device), None))
    return copies


def _reached(walker: LivenessWalker, op: int, first: int, position: dict[int, int],
             readers: set[int], producers: dict[int, set[int]],
             together: dict[int, set[int]]) -> bool:
    """Whether ``op`` depends on every op of ``readers`` (all of its block),
    directly or through others: XLA's copy insertion orders ops by their
    dependencies (``DependencyHloOrdering``), not by where they are listed.
    ``producers`` keeps each op's producers in the block between calls."""
    graph = walker.graph
    missing = set(readers) - {op}
    if any(position[r] > position[op] for r in missing):
        return False
    stack, seen = [op], {op}
    while stack and missing:
        current = stack.pop()
        if current not in producers:
            owners = (graph.value_def[v] for v in walker.operands_within(current))
            producers[current] = set().union(*(
                together.get(top, {top}) for top in
                (walker.top_user(o, first) for o in owners if o >= 0)))
        for owner in producers[current]:
            if owner in position and owner not in seen:
                seen.add(owner)
                missing.discard(owner)
                stack.append(owner)
    return not missing


def _fused(walker: LivenessWalker, op: int, returned: set[int]) -> bool:
    """Whether XLA fuses ``op`` into its readers (each computes it again)."""
    graph = walker.graph
    return graph.op_name[op] in FUSIBLE and not any(
        r in returned or walker.materialised(r, op) for r in graph.op_results[op])


def _kernels_reading(walker: LivenessWalker, value: int, first: int,
                     position: dict[int, int], returned: set[int]) -> set[int]:
    """The ops of the block that read ``value`` as XLA runs them: a reader fused
    into its own readers reads it where those run."""
    graph = walker.graph
    found: set[int] = set()
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for user, index in graph.uses[current]:
            top = walker.top_user(user, first)
            if top not in position:
                continue
            if top == user and _fused(walker, user, returned):
                results = graph.op_results[user]
                # an optimization barrier passes each operand on as its own result
                stack.extend([results[index]] if graph.op_name[user] == _BARRIER else results)
            else:
                found.add(top)
    return found


def _place_in_outputs(intervals: list[Interval], flat: list[Interval],
                       slots: list[tuple[int, int, int, set[int]]]) -> list[Interval]:
    """The temporaries XLA places in output buffers before the outputs are written.

    XLA's buffer assigner takes values largest first and gives a temporary
    the smallest existing allocation it fits in whose values it does not
    overlap; an output buffer not aliased with an argument is such an
    allocation up to the op that writes the output, and through that op for
    a value it reads in place (each slot's set:
    ``LivenessWalker.read_in_place``). A donated argument's buffer, which an
    output reuses, is such an allocation from its last reader on (an
    argument that is not donated never is). What does not fit goes to the
    heap, i.e. into ``temp``. Seen in the buffer assignment of the zoo's
    vit_bf16 step: its gradient outputs' allocations hold most of the
    forward and backward activations; and of optax_multisteps: the donated
    optimizer state's allocations hold the second micro-step's activations.
    Two temporaries share a slot where they do not overlap on the program's
    line of moments (``flat``: ``_flattened``): the buffers of a conditional's
    branches, run one after the other, do not (dropout_cond's backward switch:
    each branch's weight gradient, dot.3, dot.5 and dot.7, in one output's
    allocation).
    """
    order = sorted(range(len(slots)), key=lambda s: slots[s][0])
    sizes = [slots[s][0] for s in order]
    # Each slot's temporaries are disjoint: kept sorted by start (their ends are
    # then sorted too), so whether one overlaps an interval is one bisection.
    starts: dict[int, list[int]] = {s: [] for s in order}
    ends: dict[int, list[int]] = {s: [] for s in order}
    packed = []
    for k in sorted(range(len(intervals)), key=lambda k: -intervals[k].size):
        interval, first, last = intervals[k], flat[k].start, flat[k].end
        # (The slots too small for it come first in ``order``.)
        for s in order[bisect.bisect_left(sizes, interval.size):]:
            _, opens, written, in_place = slots[s]
            if interval.start <= opens:
                continue
            if not ((interval.fits_output and interval.end < written) or (
                    interval.end == written and not in_place.isdisjoint(interval.holders))):
                continue
            # The last temporary starting by the interval's end overlaps it if any does.
            at = bisect.bisect_right(starts[s], last)
            if at and ends[s][at - 1] >= first:
                continue
            starts[s].insert(at, first)
            ends[s].insert(at, last)
            packed.append(interval)
            break
    return packed
