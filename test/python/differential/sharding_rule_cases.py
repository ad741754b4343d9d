"""Seeded generator of small StableHLO/sdy ops, one func each, for the rule differential test.

Every op kind the rule registry covers has a generator method (random shapes,
size-1 and size-0 dims, random attributes); ``generate_cases`` sweeps every
kind once, then draws weighted random kinds. Used by
``test_sharding_rules_differential.py``.
"""

from __future__ import annotations

import math
import random

SEED = 20240605
NUM_CASES = 420
MESH = 'sdy.mesh @mesh = <["a"=2, "b"=2]>'
ORACLE = "builtin.module(sdy-basic-propagate{keep-sharding-rules=true%s})"


def t(shape, dtype="f32"):
    """Tensor type text."""
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def arr(values):
    return "array<i64" + (": " + ", ".join(map(str, values)) if values else "") + ">"


def ilist(values):
    return "[" + ", ".join(map(str, values)) + "]"


class Case:
    """One func: argument types, body lines, results to return, and the op kind."""

    def __init__(self, kind: str):
        self.kind = kind
        self.args: list[str] = []
        self.lines: list[str] = []
        self.returns: list[tuple[str, str]] = []
        self._next = 0

    def arg(self, type_text: str) -> str:
        self.args.append(type_text)
        return f"%arg{len(self.args) - 1}"

    def op(self, text: str, *result_types: str, ret: bool = True) -> list[str]:
        names = [f"%v{self._next}_{i}" for i in range(len(result_types))]
        self._next += 1
        lhs = (", ".join(names) + " = ") if names else ""
        if len(names) > 1:
            lhs = f"%v{self._next - 1}:{len(names)} = "
            names = [f"%v{self._next - 1}#{i}" for i in range(len(names))]
        self.lines.append(lhs + text)
        if ret:
            self.returns.extend(zip(names, result_types))
        return names

    def const(self, value: int = 0, dtype: str = "i32") -> str:
        return self.op(f"stablehlo.constant dense<{value}> : tensor<{dtype}>",
                       f"tensor<{dtype}>", ret=False)[0]

    def text(self, index: int) -> str:
        params = ", ".join(
            f"%arg{i}: {ty} {{sdy.sharding = #sdy.sharding<@mesh, [{open_dims(ty)}]>}}"
            if ty.startswith("tensor") else f"%arg{i}: {ty}"
            for i, ty in enumerate(self.args)
        )
        result_types = ", ".join(ty for _, ty in self.returns)
        body = "\n    ".join(self.lines)
        ret = ""
        if self.returns:
            ret = "return " + ", ".join(n for n, _ in self.returns) + " : " + result_types
        else:
            ret = "return"
        return (f"  func.func @case{index}({params}) -> ({result_types}) {{\n    {body}\n"
                f"    {ret}\n  }}")


def open_dims(type_text: str) -> str:
    rank = len(ir_shape(type_text))
    return ", ".join(["{?}"] * rank)


def ir_shape(type_text: str) -> list[int]:
    inner = type_text[len("tensor<"):-1]
    parts = inner.split("x")
    return [int(p) for p in parts[:-1] if p.isdigit()]


def region(args: str, body: str) -> str:
    return "({\n      ^bb0(" + args + "):\n        " + body + "\n    })"


def regions(*parts: str) -> str:
    """Join several ``region()`` texts into one parenthesized region list."""
    return "(" + ", ".join(p[1:-1] for p in parts) + ")"


def add_body(dtype="f32", n=1):
    """A reduction body over ``n`` inputs: elementwise add per input."""
    args = ", ".join(f"%a{i}: tensor<{dtype}>" for i in range(2 * n))
    adds = "\n        ".join(
        f"%s{i} = stablehlo.add %a{i}, %a{n + i} : tensor<{dtype}>" for i in range(n))
    rets = ", ".join(f"%s{i}" for i in range(n))
    types = ", ".join([f"tensor<{dtype}>"] * n)
    return region(args, f"{adds}\n        stablehlo.return {rets} : {types}")


class Generator:
    """Random op cases; every method adds one case of one op kind."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.forced: str | None = None  # set by the sweep to pick one named option

    def pick(self, options):
        """A random option, or the forced one when the sweep asks for it."""
        return self.forced if self.forced in options else self.r.choice(options)

    def pick_group(self, groups: dict[str, tuple[str, ...]]) -> str:
        """A random group key, or the key whose members hold the forced option."""
        for key, members in groups.items():
            if self.forced == key or self.forced in members:
                return key
        return self.r.choice(list(groups))

    def dim(self, zero: bool = True) -> int:
        r = self.r.random()
        if zero and r < 0.03:
            return 0
        if r < 0.2:
            return 1
        return self.r.choice([2, 3, 4, 6, 8, 12, 16])

    def shape(self, lo=0, hi=4, zero=True) -> list[int]:
        return [self.dim(zero) for _ in range(self.r.randint(lo, hi))]

    # -- elementwise ---------------------------------------------------------
    FLOAT_UNARY = ("abs", "cbrt", "ceil", "cosine", "exponential", "exponential_minus_one",
                   "floor", "log", "log_plus_one", "logistic", "negate", "round_nearest_afz",
                   "round_nearest_even", "rsqrt", "sign", "sine", "sqrt", "tan", "tanh")
    FLOAT_BINARY = ("add", "atan2", "divide", "maximum", "minimum", "multiply", "power",
                    "remainder", "subtract")
    INT_UNARY = ("count_leading_zeros", "not", "popcnt")
    INT_BINARY = ("and", "or", "xor", "shift_left", "shift_right_arithmetic",
                  "shift_right_logical")

    def elementwise(self, c: Case):
        s = self.shape()
        kind = self.pick_group({
            "fu": self.FLOAT_UNARY, "fb": self.FLOAT_BINARY, "iu": self.INT_UNARY,
            "ib": self.INT_BINARY, **{k: () for k in ("cmp", "cvt", "cplx", "fin", "rp", "ri")},
        })
        if kind == "fu":
            a = c.arg(t(s))
            c.op(f"stablehlo.{self.pick(self.FLOAT_UNARY)} {a} : {t(s)}", t(s))
        elif kind == "fb":
            a, b = c.arg(t(s)), c.arg(t(s))
            c.op(f"stablehlo.{self.pick(self.FLOAT_BINARY)} {a}, {b} : {t(s)}", t(s))
        elif kind == "iu":
            a = c.arg(t(s, "i32"))
            c.op(f"stablehlo.{self.pick(self.INT_UNARY)} {a} : {t(s, 'i32')}", t(s, "i32"))
        elif kind == "ib":
            a, b = c.arg(t(s, "i32")), c.arg(t(s, "i32"))
            name = self.pick(self.INT_BINARY)
            c.op(f"stablehlo.{name} {a}, {b} : {t(s, 'i32')}", t(s, "i32"))
        elif kind == "cmp":
            a, b = c.arg(t(s)), c.arg(t(s))
            c.op(f"stablehlo.compare LT, {a}, {b} : ({t(s)}, {t(s)}) -> {t(s, 'i1')}",
                 t(s, "i1"))
        elif kind == "cvt":
            a = c.arg(t(s))
            c.op(f"stablehlo.convert {a} : ({t(s)}) -> {t(s, 'i32')}", t(s, "i32"))
        elif kind == "cplx":
            a, b = c.arg(t(s)), c.arg(t(s))
            cs = t(s, "complex<f32>")
            v = c.op(f"stablehlo.complex {a}, {b} : {cs}", cs)[0]
            c.op(f"stablehlo.real {v} : ({cs}) -> {t(s)}", t(s))
            c.op(f"stablehlo.imag {v} : ({cs}) -> {t(s)}", t(s))
        elif kind == "fin":
            a = c.arg(t(s))
            c.op(f"stablehlo.is_finite {a} : ({t(s)}) -> {t(s, 'i1')}", t(s, "i1"))
        elif kind == "rp":
            a = c.arg(t(s))
            c.op(f"stablehlo.reduce_precision {a}, format = e5m10 : {t(s)}", t(s))
        else:
            a = c.arg(t(s))
            c.op(f'"stablehlo.cross-replica-sum"({a}) {{replica_groups = dense<[[0, 1]]> : '
                 f"tensor<1x2xi64>}} : ({t(s)}) -> {t(s)}", t(s))

    def select_clamp(self, c: Case):
        s = self.shape()
        scalar = self.r.random() < 0.5
        p = c.arg(t([] if scalar else s, "i1"))
        a, b = c.arg(t(s)), c.arg(t(s))
        c.op(f"stablehlo.select {p}, {a}, {b} : ({t([] if scalar else s, 'i1')}, {t(s)}, "
             f"{t(s)}) -> {t(s)}", t(s))
        lo = c.arg(t([] if scalar else s))
        c.op(f"stablehlo.clamp {lo}, {a}, {lo} : ({t([] if scalar else s)}, {t(s)}, "
             f"{t([] if scalar else s)}) -> {t(s)}", t(s))

    def bitcast_convert(self, c: Case):
        s = self.shape(0, 3)
        mode = self.r.choice(["eq", "up", "down"])
        if mode == "eq":
            a = c.arg(t(s))
            c.op(f"stablehlo.bitcast_convert {a} : ({t(s)}) -> {t(s, 'i32')}", t(s, "i32"))
        elif mode == "up":
            a = c.arg(t(s))
            c.op(f"stablehlo.bitcast_convert {a} : ({t(s)}) -> {t(s + [2], 'f16')}",
                 t(s + [2], "f16"))
        else:
            a = c.arg(t(s + [2], "f16"))
            c.op(f"stablehlo.bitcast_convert {a} : ({t(s + [2], 'f16')}) -> {t(s)}", t(s))

    # -- shape ---------------------------------------------------------------
    def broadcast_in_dim(self, c: Case):
        out = self.shape(0, 4)
        in_rank = self.r.randint(0, len(out))
        dims = sorted(self.r.sample(range(len(out)), in_rank))
        if self.r.random() < 0.3:
            self.r.shuffle(dims)
        ins = [out[d] if self.r.random() < 0.6 else 1 for d in dims]
        a = c.arg(t(ins))
        c.op(f"stablehlo.broadcast_in_dim {a}, dims = {ilist(dims)} : ({t(ins)}) -> {t(out)}",
             t(out))

    def _factorize(self, n: int) -> list[int]:
        primes, k = [], 2
        while n > 1:
            while n % k == 0:
                primes.append(k)
                n //= k
            k += 1
        return primes

    def _regroup(self, primes: list[int]) -> list[int]:
        dims: list[int] = []
        for p in primes:
            if dims and self.r.random() < 0.5:
                dims[-1] *= p
            else:
                dims.append(p)
        out = []
        for d in dims:
            if self.r.random() < 0.15:
                out.append(1)
            out.append(d)
        return out

    def reshape(self, c: Case):
        fixed = [([8], [2, 4]), ([8, 4], [2, 16]), ([6, 4], [24]), ([2, 16], [8, 4]),
                 ([4, 6], [3, 8]), ([12], [3, 4]), ([1, 6, 1], [2, 3])]
        if self.r.random() < 0.25:
            ins, out = self.r.choice(fixed)
        else:
            ins = self.shape(0, 4, zero=False)
            primes = self._factorize(math.prod(ins))
            if self.r.random() < 0.5:
                self.r.shuffle(primes)
            out = self._regroup(primes)
            if self.r.random() < 0.05:
                ins, out = ins + [0], [0] + out
        a = c.arg(t(ins))
        c.op(f"stablehlo.reshape {a} : ({t(ins)}) -> {t(out)}", t(out))

    def transpose(self, c: Case):
        s = self.shape(1, 4)
        perm = list(range(len(s)))
        self.r.shuffle(perm)
        out = [s[p] for p in perm]
        a = c.arg(t(s))
        c.op(f"stablehlo.transpose {a}, dims = {ilist(perm)} : ({t(s)}) -> {t(out)}", t(out))

    def reverse(self, c: Case):
        s = self.shape(1, 4)
        dims = sorted(self.r.sample(range(len(s)), self.r.randint(1, len(s))))
        a = c.arg(t(s))
        c.op(f"stablehlo.reverse {a}, dims = {ilist(dims)} : {t(s)}", t(s))

    def _slice_of(self, c: Case, src: str, s: list[int], dim: int):
        start = self.r.randint(0, s[dim])
        limit = self.r.randint(start, s[dim])
        out = list(s)
        out[dim] = limit - start
        starts = [start if d == dim else 0 for d in range(len(s))]
        limits = [limit if d == dim else s[d] for d in range(len(s))]
        ranges = ", ".join(f"{a}:{b}" for a, b in zip(starts, limits))
        return c.op(f"stablehlo.slice {src} [{ranges}]"
                    f" : ({t(s)}) -> {t(out)}", t(out), ret=False)[0], out

    def concatenate(self, c: Case):
        s = self.shape(1, 3, zero=False)
        dim = self.r.randrange(len(s))
        mode = self.r.choice(["args", "slices", "mixed", "slices_of_two"])
        src = c.arg(t(s))
        parts = []
        for i in range(self.r.randint(2, 3)):
            if mode == "args":
                p = list(s)
                p[dim] = self.dim()
                parts.append((c.arg(t(p)), p))
            elif mode == "mixed" and i == 0:
                parts.append((src, s))
            elif mode == "slices_of_two" and i == 1:
                other = c.arg(t(s))
                parts.append(self._slice_of(c, other, s, dim))
            else:
                parts.append(self._slice_of(c, src, s, dim))
        out = list(s)
        out[dim] = sum(p[dim] for _, p in parts)
        names = ", ".join(n for n, _ in parts)
        types = ", ".join(t(p) for _, p in parts)
        c.op(f"stablehlo.concatenate {names}, dim = {dim} : ({types}) -> {t(out)}", t(out))

    def slice_(self, c: Case):
        s = self.shape(1, 4)
        starts, limits, strides, out = [], [], [], []
        for d in s:
            if self.r.random() < 0.4:
                starts.append(0), limits.append(d), strides.append(1), out.append(d)
                continue
            lo = self.r.randint(0, d)
            hi = self.r.randint(lo, d)
            st = self.r.choice([1, 1, 2, 3])
            starts.append(lo), limits.append(hi), strides.append(st)
            out.append(-(-(hi - lo) // st))
        a = c.arg(t(s))
        c.op(f'"stablehlo.slice"({a}) {{start_indices = {arr(starts)}, limit_indices = '
             f"{arr(limits)}, strides = {arr(strides)}}} : ({t(s)}) -> {t(out)}", t(out))

    def pad(self, c: Case):
        s = self.shape(1, 4)
        lo, hi, interior, out = [], [], [], []
        for d in s:
            if self.r.random() < 0.4:
                lo.append(0), hi.append(0), interior.append(0), out.append(d)
                continue
            low, high, inner = self.r.randint(0, 2), self.r.randint(0, 2), self.r.randint(0, 1)
            lo.append(low), hi.append(high), interior.append(inner)
            out.append(low + high + d + max(d - 1, 0) * inner)
        a, v = c.arg(t(s)), c.arg(t([]))
        c.op(f"stablehlo.pad {a}, {v}, low = {ilist(lo)}, high = {ilist(hi)}, interior = "
             f"{ilist(interior)} : ({t(s)}, {t([])}) -> {t(out)}", t(out))

    def iota(self, c: Case):
        s = self.shape(1, 3)
        c.op(f"stablehlo.iota dim = 0 : {t(s)}", t(s))

    # -- indexing ------------------------------------------------------------
    def _starts(self, c: Case, rank: int) -> list[str]:
        use_const = self.r.random() < 0.5
        return [c.const(0) if use_const else c.arg(t([], "i32")) for _ in range(rank)]

    def dynamic_slice(self, c: Case):
        s = self.shape(1, 4)
        sizes = [d if self.r.random() < 0.5 else self.r.randint(0, d) for d in s]
        a = c.arg(t(s))
        idx = self._starts(c, len(s))
        c.op(f"stablehlo.dynamic_slice {a}, {', '.join(idx)}, sizes = {ilist(sizes)} : "
             f"({t(s)}, {', '.join([t([], 'i32')] * len(s))}) -> {t(sizes)}", t(sizes))

    def dynamic_update_slice(self, c: Case):
        s = self.shape(1, 4)
        upd = [d if self.r.random() < 0.5 else self.r.randint(0, d) for d in s]
        a, u = c.arg(t(s)), c.arg(t(upd))
        idx = self._starts(c, len(s))
        c.op(f"stablehlo.dynamic_update_slice {a}, {u}, {', '.join(idx)} : ({t(s)}, {t(upd)}, "
             f"{', '.join([t([], 'i32')] * len(s))}) -> {t(s)}", t(s))

    def _index_layout(self, operand: list[int]):
        """Random gather/scatter dims: returns a dict of the dimension-number pieces."""
        r = self.r
        rank = len(operand)
        dims = list(range(rank))
        r.shuffle(dims)
        n_batching = r.choice([0, 0, 1]) if rank > 1 else 0
        operand_batching = sorted(dims[:n_batching])
        rest = dims[n_batching:]
        n_index = r.randint(1, len(rest)) if rest else 0
        start_index_map = rest[:n_index]
        collapsed = sorted(r.sample(start_index_map, r.randint(0, len(start_index_map))))
        n_batch = r.randint(max(1, n_batching), 2)
        batch_sizes = [self.dim(zero=False) for _ in range(n_batch)]
        index_vector_dim = r.randint(0, n_batch) if n_index > 1 or r.random() < 0.7 else n_batch
        implicit = index_vector_dim == n_batch and n_index == 1 and r.random() < 0.5
        indices = list(batch_sizes)
        if not implicit:
            indices.insert(index_vector_dim, n_index)
        else:
            index_vector_dim = len(indices)
        idx_batch_positions = [p for p in range(len(indices)) if p != index_vector_dim]
        indices_batching = sorted(r.sample(idx_batch_positions, n_batching))
        for op_dim, idx_dim in zip(operand_batching, indices_batching):
            indices[idx_dim] = operand[op_dim]
        slice_sizes = []
        for d, size in enumerate(operand):
            if d in collapsed or d in operand_batching:
                slice_sizes.append(min(size, 1))
            else:
                slice_sizes.append(size if r.random() < 0.5 else r.randint(0, size))
        window = [slice_sizes[d] for d in range(rank)
                  if d not in collapsed and d not in operand_batching]
        batch_shape = [indices[p] for p in idx_batch_positions]
        out_rank = len(batch_shape) + len(window)
        offset_dims = sorted(r.sample(range(out_rank), len(window)))
        out, wi, bi = [], iter(window), iter(batch_shape)
        for p in range(out_rank):
            out.append(next(wi) if p in offset_dims else next(bi))
        return dict(operand_batching=operand_batching, indices_batching=indices_batching,
                    start_index_map=start_index_map, collapsed=collapsed,
                    index_vector_dim=index_vector_dim, indices=indices,
                    slice_sizes=slice_sizes, offset_dims=offset_dims, out=out)

    def gather(self, c: Case):
        operand = self.shape(1, 4, zero=False)
        L = self._index_layout(operand)
        a, i = c.arg(t(operand)), c.arg(t(L["indices"], "i32"))
        dn = (f"#stablehlo.gather<offset_dims = {ilist(L['offset_dims'])}, collapsed_slice_dims"
              f" = {ilist(L['collapsed'])}, operand_batching_dims = "
              f"{ilist(L['operand_batching'])}, start_indices_batching_dims = "
              f"{ilist(L['indices_batching'])}, start_index_map = {ilist(L['start_index_map'])}"
              f", index_vector_dim = {L['index_vector_dim']}>")
        c.op(f'"stablehlo.gather"({a}, {i}) {{dimension_numbers = {dn}, slice_sizes = '
             f"{arr(L['slice_sizes'])}}} : ({t(operand)}, {t(L['indices'], 'i32')}) -> "
             f"{t(L['out'])}", t(L["out"]))

    def scatter(self, c: Case):
        operand = self.shape(1, 4, zero=False)
        L = self._index_layout(operand)
        n = self.r.choice([1, 1, 2])
        ins = [c.arg(t(operand)) for _ in range(n)]
        i = c.arg(t(L["indices"], "i32"))
        upd = [c.arg(t(L["out"])) for _ in range(n)]
        dn = (f"#stablehlo.scatter<update_window_dims = {ilist(L['offset_dims'])}, "
              f"inserted_window_dims = {ilist(L['collapsed'])}, input_batching_dims = "
              f"{ilist(L['operand_batching'])}, scatter_indices_batching_dims = "
              f"{ilist(L['indices_batching'])}, scatter_dims_to_operand_dims = "
              f"{ilist(L['start_index_map'])}, index_vector_dim = {L['index_vector_dim']}>")
        style = self.r.choice(["add", "add", "max", "replace", "swapped"])
        args = ", ".join(f"%a{k}: tensor<f32>" for k in range(2 * n))
        if style == "replace":
            body = f"stablehlo.return {', '.join(f'%a{n + k}' for k in range(n))} : " + \
                ", ".join(["tensor<f32>"] * n)
        else:
            name = "maximum" if style == "max" else "add"
            lines = [f"%s{k} = stablehlo.{name} "
                     + (f"%a{n + k}, %a{k}" if style == "swapped" else f"%a{k}, %a{n + k}")
                     + " : tensor<f32>" for k in range(n)]
            body = "\n        ".join(lines) + "\n        stablehlo.return " + \
                ", ".join(f"%s{k}" for k in range(n)) + " : " + ", ".join(["tensor<f32>"] * n)
        types = ", ".join([t(operand)] * n + [t(L["indices"], "i32")] + [t(L["out"])] * n)
        c.op(f'"stablehlo.scatter"({", ".join(ins + [i] + upd)}) '
             f"{region(args, body)} {{scatter_dimension_numbers = {dn}}} : ({types}) -> "
             f"({', '.join([t(operand)] * n)})", *([t(operand)] * n))

    # -- contraction ---------------------------------------------------------
    def dot_general(self, c: Case):
        r = self.r
        batch = [self.dim() for _ in range(r.randint(0, 2))]
        contract = [self.dim() for _ in range(r.randint(0, 2))]
        lfree = [self.dim() for _ in range(r.randint(0, 2))]
        rfree = [self.dim() for _ in range(r.randint(0, 2))]

        def layout(free):
            tags = [("b", k) for k in range(len(batch))] + [("c", k) for k in range(len(contract))]
            tags += [("f", k) for k in range(len(free))]
            r.shuffle(tags)
            return tags

        lt, rt = layout(lfree), layout(rfree)
        size = {"b": batch, "c": contract}
        lshape = [(size.get(k) or lfree)[i] if k != "f" else lfree[i] for k, i in lt]
        rshape = [(size.get(k) or rfree)[i] if k != "f" else rfree[i] for k, i in rt]
        lb = [lt.index(("b", k)) for k in range(len(batch))]
        rb = [rt.index(("b", k)) for k in range(len(batch))]
        lc = [lt.index(("c", k)) for k in range(len(contract))]
        rc = [rt.index(("c", k)) for k in range(len(contract))]
        lf = [lshape[p] for p, (k, _) in enumerate(lt) if k == "f"]
        rf = [rshape[p] for p, (k, _) in enumerate(rt) if k == "f"]
        out = batch + lf + rf
        a, b = c.arg(t(lshape)), c.arg(t(rshape))
        dn = (f"#stablehlo.dot<lhs_batching_dimensions = {ilist(lb)}, rhs_batching_dimensions = "
              f"{ilist(rb)}, lhs_contracting_dimensions = {ilist(lc)}, "
              f"rhs_contracting_dimensions = {ilist(rc)}>")
        c.op(f'"stablehlo.dot_general"({a}, {b}) {{dot_dimension_numbers = {dn}}} : '
             f"({t(lshape)}, {t(rshape)}) -> {t(out)}", t(out))

    def dot(self, c: Case):
        m, k, n = self.dim(), self.dim(), self.dim()
        lshape = [m, k] if self.r.random() < 0.6 else [k]
        rshape = [k, n] if self.r.random() < 0.6 else [k]
        out = lshape[:-1] + rshape[1:]
        a, b = c.arg(t(lshape)), c.arg(t(rshape))
        c.op(f"stablehlo.dot {a}, {b} : ({t(lshape)}, {t(rshape)}) -> {t(out)}", t(out))

    def convolution(self, c: Case):
        r = self.r
        nsp = r.randint(1, 2)
        groups = r.choice([1, 1, 2, 3])
        batch_groups = r.choice([1, 1, 2]) if groups == 1 else 1
        batch = r.choice([1, 2, 4]) * batch_groups
        in_feat_per_group = r.choice([1, 2, 3])
        out_feat = r.choice([1, 2, 4]) * groups * batch_groups
        spatial = [r.choice([1, 3, 4, 8, 16]) for _ in range(nsp)]
        kernel = [r.randint(1, s) for s in spatial]
        strides = [r.choice([1, 1, 2]) for _ in range(nsp)]
        out_sp = [(s - k) // st + 1 for s, k, st in zip(spatial, kernel, strides)]
        lhs = [batch] + spatial + [in_feat_per_group * groups]
        rhs = kernel + [in_feat_per_group, out_feat]
        out = [batch // batch_groups] + out_sp + [out_feat]
        sp = ", ".join(str(d) for d in range(nsp))
        dn = f"#stablehlo.conv<[b, {sp}, f]x[{sp}, i, o]->[b, {sp}, f]>"
        if r.random() < 0.4:  # NCHW-like layouts
            lhs = [lhs[0], lhs[-1]] + lhs[1:-1]
            rhs = [rhs[-1], rhs[-2]] + rhs[:-2]
            out = [out[0], out[-1]] + out[1:-1]
            dn = f"#stablehlo.conv<[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]>"
        a, b = c.arg(t(lhs)), c.arg(t(rhs))
        c.op(f'"stablehlo.convolution"({a}, {b}) {{batch_group_count = {batch_groups} : i64, '
             f"dimension_numbers = {dn}, feature_group_count = {groups} : i64, "
             f"window_strides = {arr(strides)}}} : ({t(lhs)}, {t(rhs)}) -> {t(out)}", t(out))

    # -- reduction -----------------------------------------------------------
    def reduce(self, c: Case):
        s = self.shape(1, 4)
        n = self.r.choice([1, 1, 2])
        dims = sorted(self.r.sample(range(len(s)), self.r.randint(0, len(s))))
        out = [d for i, d in enumerate(s) if i not in dims]
        ins = [c.arg(t(s)) for _ in range(n)]
        inits = [c.arg(t([])) for _ in range(n)]
        c.op(f'"stablehlo.reduce"({", ".join(ins + inits)}) {add_body("f32", n)} '
             f"{{dimensions = {arr(dims)}}} : ({', '.join([t(s)] * n + [t([])] * n)}) -> "
             f"({', '.join([t(out)] * n)})", *([t(out)] * n))

    def _window(self, s: list[int], cumsum: bool = False):
        if cumsum:
            axis = self.r.randrange(len(s))
            win = [s[d] if d == axis else 1 for d in range(len(s))]
            pad = [(s[d] - 1, 0) if d == axis else (0, 0) for d in range(len(s))]
            return win, [1] * len(s), pad, list(s)
        win, strides, pad, out = [], [], [], []
        for d in s:
            if self.r.random() < 0.4 or d == 0:
                win.append(1), strides.append(1), pad.append((0, 0)), out.append(d)
                continue
            w = self.r.randint(1, d)
            st = self.r.choice([1, 2])
            p = (self.r.randint(0, 1), self.r.randint(0, 1))
            win.append(w), strides.append(st), pad.append(p)
            out.append((d + p[0] + p[1] - w) // st + 1)
        return win, strides, pad, out

    def reduce_window(self, c: Case):
        s = self.shape(1, 3)
        win, strides, pad, out = self._window(s, cumsum=self.r.random() < 0.3)
        a, v = c.arg(t(s)), c.arg(t([]))
        padding = f"dense<{[list(p) for p in pad]}> : tensor<{len(s)}x2xi64>"
        c.op(f'"stablehlo.reduce_window"({a}, {v}) {add_body()} {{window_dimensions = '
             f"{arr(win)}, window_strides = {arr(strides)}, padding = {padding}}} : "
             f"({t(s)}, {t([])}) -> {t(out)}", t(out))

    def select_and_scatter(self, c: Case):
        s = self.shape(1, 3, zero=False)
        win, strides, pad, out = self._window(s)
        a, src, v = c.arg(t(s)), c.arg(t(out)), c.arg(t([]))
        select = region("%x: tensor<f32>, %y: tensor<f32>",
                        "%p = stablehlo.compare GE, %x, %y : (tensor<f32>, tensor<f32>) -> "
                        "tensor<i1>\n        stablehlo.return %p : tensor<i1>")
        padding = f"dense<{[list(p) for p in pad]}> : tensor<{len(s)}x2xi64>"
        c.op(f'"stablehlo.select_and_scatter"({a}, {src}, {v}) {regions(select, add_body())} '
             f"{{window_dimensions = {arr(win)}, window_strides = {arr(strides)}, "
             f"padding = {padding}}} : ({t(s)}, {t(out)}, {t([])}) -> {t(s)}", t(s))

    def sort(self, c: Case):
        s = self.shape(1, 3)
        n = self.r.choice([1, 2])
        dim = self.r.randrange(len(s))
        ins = [c.arg(t(s)) for _ in range(n)]
        args = ", ".join(f"%a{k}: tensor<f32>" for k in range(2 * n))
        cmp = region(args, "%p = stablehlo.compare GT, %a0, %a1 : (tensor<f32>, tensor<f32>) "
                     "-> tensor<i1>\n        stablehlo.return %p : tensor<i1>")
        c.op(f'"stablehlo.sort"({", ".join(ins)}) {cmp} {{dimension = {dim} : i64}} : '
             f"({', '.join([t(s)] * n)}) -> ({', '.join([t(s)] * n)})", *([t(s)] * n))

    # -- linalg / signal -----------------------------------------------------
    def cholesky(self, c: Case):
        n = self.dim()
        s = self.shape(0, 2) + [n, n]
        a = c.arg(t(s))
        c.op(f'"stablehlo.cholesky"({a}) {{lower = true}} : ({t(s)}) -> {t(s)}', t(s))

    def triangular_solve(self, c: Case):
        n, m = self.dim(), self.dim()
        batch = self.shape(0, 2)
        left = self.r.random() < 0.5
        a_shape = batch + [n, n]
        b_shape = batch + ([n, m] if left else [m, n])
        ta = self.r.choice(["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"])
        a, b = c.arg(t(a_shape)), c.arg(t(b_shape))
        c.op(f'"stablehlo.triangular_solve"({a}, {b}) {{left_side = {str(left).lower()}, '
             f"lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose {ta}>}}"
             f" : ({t(a_shape)}, {t(b_shape)}) -> {t(b_shape)}", t(b_shape))

    def fft(self, c: Case):
        batch = self.shape(0, 2)
        lengths = [self.r.choice([2, 4, 8]) for _ in range(self.r.randint(1, 2))]
        kind = self.r.choice(["FFT", "IFFT", "RFFT", "IRFFT"])
        cf = "complex<f32>"
        if kind in ("FFT", "IFFT"):
            ins, out, it, ot = batch + lengths, batch + lengths, cf, cf
        elif kind == "RFFT":
            half = batch + lengths[:-1] + [lengths[-1] // 2 + 1]
            ins, out, it, ot = batch + lengths, half, "f32", cf
        else:
            half = batch + lengths[:-1] + [lengths[-1] // 2 + 1]
            ins, out, it, ot = half, batch + lengths, cf, "f32"
        a = c.arg(t(ins, it))
        c.op(f"stablehlo.fft {a}, type = {kind}, length = {ilist(lengths)} : ({t(ins, it)}) -> "
             f"{t(out, ot)}", t(out, ot))

    def batch_norm_inference(self, c: Case):
        s = self.shape(1, 4)
        f = self.r.randrange(len(s))
        a = c.arg(t(s))
        stats = [c.arg(t([s[f]])) for _ in range(4)]
        c.op(f'"stablehlo.batch_norm_inference"({a}, {", ".join(stats)}) {{epsilon = 1.0e-3 : '
             f"f32, feature_index = {f} : i64}} : ({t(s)}, {', '.join([t([s[f]])] * 4)}) -> "
             f"{t(s)}", t(s))

    def rng_bit_generator(self, c: Case):
        out = self.shape(0, 3)
        a = c.arg(t([2], "ui64"))
        c.op(f'"stablehlo.rng_bit_generator"({a}) {{rng_algorithm = #stablehlo<rng_algorithm '
             f"DEFAULT>}} : ({t([2], 'ui64')}) -> ({t([2], 'ui64')}, {t(out, 'ui32')})",
             t([2], "ui64"), t(out, "ui32"))

    # -- collectives ---------------------------------------------------------
    GROUPS = "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"

    def collective(self, c: Case):
        s = self.shape(1, 3, zero=False)
        dim = self.r.randrange(len(s))
        kind = self.pick(COLLECTIVES)
        a = c.arg(t(s))
        if kind == "all_gather":
            out = list(s)
            out[dim] *= 2
            c.op(f'"stablehlo.all_gather"({a}) {{all_gather_dim = {dim} : i64, {self.GROUPS}}} '
                 f": ({t(s)}) -> {t(out)}", t(out))
        elif kind == "all_reduce":
            c.op(f'"stablehlo.all_reduce"({a}) {add_body()} {{{self.GROUPS}}} : ({t(s)}) -> '
                 f"{t(s)}", t(s))
        elif kind == "all_to_all":
            split = self.r.randrange(len(s))
            s2 = list(s)
            s2[split] *= 2
            a = c.arg(t(s2))
            out = list(s2)
            out[split] //= 2
            out[dim] *= 2
            c.op(f'"stablehlo.all_to_all"({a}) {{split_dimension = {split} : i64, '
                 f"concat_dimension = {dim} : i64, split_count = 2 : i64, {self.GROUPS}}} : "
                 f"({t(s2)}) -> {t(out)}", t(out))
        elif kind == "reduce_scatter":
            s2 = list(s)
            s2[dim] *= 2
            a = c.arg(t(s2))
            c.op(f'"stablehlo.reduce_scatter"({a}) {add_body()} {{scatter_dimension = {dim} : '
                 f"i64, {self.GROUPS}}} : ({t(s2)}) -> {t(s)}", t(s))
        else:
            c.op(f'"stablehlo.collective_permute"({a}) {{source_target_pairs = dense<[[0, 1], '
                 f"[1, 0]]> : tensor<2x2xi64>}} : ({t(s)}) -> {t(s)}", t(s))

    # -- custom calls --------------------------------------------------------
    POINTWISE_TARGETS = ("annotate_device_placement", "Cholesky", "LayoutConstraint",
                         "MoveToDevice", "MoveToHost", "mhlo.erf", "X64SplitLow",
                         "InspectSharding", "_SPMDInternalOp_RotateRight")

    def _custom(self, c: Case, target: str, args, in_types, out_types):
        return c.op(f"stablehlo.custom_call @{target}({', '.join(args)}) : "
                    f"({', '.join(in_types)}) -> ({', '.join(out_types)})", *out_types)

    def custom_call(self, c: Case):
        r = self.r
        kind = self.pick_group({
            **{k: () for k in CUSTOM_CALLS}, "pw": self.POINTWISE_TARGETS,
            "qr": ("Qr", "QrDecompositionBlock"), "approx": ("ApproxTopK", "PartialReduce"),
        })
        n, m = r.choice([2, 3, 4]), r.choice([2, 3, 4])
        batch = self.shape(0, 2, zero=False)
        if kind == "pw":
            s = self.shape(0, 3)
            self._custom(c, self.pick(self.POINTWISE_TARGETS), [c.arg(t(s))], [t(s)], [t(s)])
        elif kind == "eigh":
            s = batch + [n, n]
            self._custom(c, "Eigh", [c.arg(t(s))], [t(s)], [t(s), t(batch + [n])])
        elif kind == "qr":
            s = batch + [n, m]
            self._custom(c, self.pick(["Qr", "QrDecompositionBlock"]), [c.arg(t(s))], [t(s)],
                         [t(s), t(batch + [min(n, m)])])
        elif kind == "householder":
            s, taus = batch + [n, m], batch + [min(n, m)]
            self._custom(c, "ProductOfElementaryHouseholderReflectors",
                         [c.arg(t(s)), c.arg(t(taus))], [t(s), t(taus)], [t(s)])
        elif kind == "topk":
            s = batch + [n * 2]
            o = batch + [n]
            self._custom(c, "mhlo.topk", [c.arg(t(s))], [t(s)], [t(o), t(o, "i32")])
        elif kind == "approx":
            s, o = batch + [n * 2], batch + [n]
            args = [c.arg(t(s)), c.arg(t(s, "i32")), c.arg(t([])), c.arg(t([], "i32"))]
            self._custom(c, self.pick(["ApproxTopK", "PartialReduce"]), args,
                         [t(s), t(s, "i32"), t([]), t([], "i32")], [t(o), t(o, "i32")])
        elif kind in ("x64", "x64rng"):
            s = [2]
            v = self._custom(c, "X64Combine", [c.arg(t(s, "ui32")), c.arg(t(s, "ui32"))],
                             [t(s, "ui32")] * 2, [t(s, "ui64")])[0]
            if kind == "x64rng":
                c.op(f'"stablehlo.rng_bit_generator"({v}) {{rng_algorithm = '
                     f"#stablehlo<rng_algorithm DEFAULT>}} : ({t(s, 'ui64')}) -> "
                     f"({t(s, 'ui64')}, {t([4], 'ui32')})", t(s, "ui64"), t([4], "ui32"))
        else:
            s = self.shape(0, 2)
            target = "tpu_custom_call" if kind == "opaque" else "my_unknown_target"
            self._custom(c, target, [c.arg(t(s))], [t(s)], [t(s)])

    # -- sdy and data flow ---------------------------------------------------
    def sdy_ops(self, c: Case):
        s = self.shape(1, 3)
        a = c.arg(t(s))
        dims = ", ".join(["{?}"] * len(s))
        kind = self.pick(["constraint", "reshard", "barrier"])
        if kind == "constraint":
            c.op(f"sdy.sharding_constraint {a} <@mesh, [{dims}]> : {t(s)}", t(s))
        elif kind == "reshard":
            c.op(f"sdy.reshard {a} <@mesh, [{dims}]> : {t(s)}", t(s))
        else:
            c.op(f"sdy.propagation_barrier {a} allowed_direction=NONE : {t(s)}", t(s))

    def data_flow(self, c: Case):
        s = self.shape(0, 2)
        a = c.arg(t(s))
        kind = self.pick(["barrier", "while", "case"])
        if kind == "barrier":
            c.op(f"stablehlo.optimization_barrier {a} : {t(s)}", t(s))
        elif kind == "while":
            cond = region(f"%x: {t(s)}", "%p = stablehlo.constant dense<false> : tensor<i1>\n"
                          "        stablehlo.return %p : tensor<i1>")
            body = region(f"%x: {t(s)}", f"stablehlo.return %x : {t(s)}")
            c.op(f'"stablehlo.while"({a}) {regions(cond, body)} : ({t(s)}) -> {t(s)}', t(s))
        else:
            p = c.arg(t([], "i32"))
            br = region("", f"stablehlo.return {a} : {t(s)}").replace("^bb0():", "")
            c.op(f'"stablehlo.case"({p}) {regions(br, br)} : ({t([], "i32")}) -> {t(s)}', t(s))


COLLECTIVES = ("all_gather", "all_reduce", "all_to_all", "reduce_scatter", "collective_permute")
CUSTOM_CALLS = ("pw", "eigh", "qr", "householder", "topk", "approx", "x64", "x64rng", "opaque",
                "unknown")

# One case per named option, so every op name / target is covered at least once.
SWEEP = {
    "elementwise": ("fu", "fb", "iu", "ib", "cmp", "cvt", "cplx", "fin", "rp", "ri",
                    *Generator.FLOAT_UNARY, *Generator.FLOAT_BINARY, *Generator.INT_UNARY,
                    *Generator.INT_BINARY),
    "collective": COLLECTIVES,
    "custom_call": (*CUSTOM_CALLS, *Generator.POINTWISE_TARGETS, "Qr", "QrDecompositionBlock",
                    "ApproxTopK", "PartialReduce"),
    "sdy_ops": ("constraint", "reshard", "barrier"),
    "data_flow": ("barrier", "while", "case"),
}

# Relative weights of the op kinds in the generated set.
KINDS = {
    "elementwise": 40, "select_clamp": 8, "bitcast_convert": 8, "broadcast_in_dim": 20,
    "reshape": 36, "transpose": 12, "reverse": 6, "concatenate": 16, "slice_": 12,
    "pad": 10, "iota": 2, "dynamic_slice": 10, "dynamic_update_slice": 10, "gather": 24,
    "scatter": 24, "dot_general": 24, "dot": 8, "convolution": 20, "reduce": 14,
    "reduce_window": 16, "select_and_scatter": 8, "sort": 8, "cholesky": 4,
    "triangular_solve": 8, "fft": 8, "batch_norm_inference": 4, "rng_bit_generator": 4,
    "collective": 20, "custom_call": 24, "sdy_ops": 6, "data_flow": 6,
}


def generate_cases(seed: int = SEED, count: int = NUM_CASES) -> list[Case]:
    """``count`` cases; every kind appears at least once, then weighted random picks."""
    gen = Generator(seed)
    plan = [(kind, option) for kind, options in SWEEP.items() for option in options]
    plan += [(kind, None) for kind in KINDS]
    plan += [(kind, None) for kind in gen.r.choices(
        list(KINDS), weights=list(KINDS.values()), k=count - len(plan))]
    cases = []
    for kind, option in plan:
        case = Case(kind)
        gen.forced = option
        getattr(gen, kind)(case)
        cases.append(case)
    return cases
