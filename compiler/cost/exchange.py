"""XLA's halo exchanges along one sharded dimension, as element counts: which
collective-permutes ``ExchangeHalo`` and ``ExchangeHaloCompact`` make for the left
and right halo sizes of each shard.

Windowed reads (``halos``) and the reshards that change a dimension's padding
(``reshard``: a partially replicated source sliced to more shards, a source gathered
to fewer) both exchange halos: shard ``i`` of ``count`` (``shard`` elements each)
reads ``[shard * i - left(i), shard * (i + 1) + right(i))`` of the dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Offsets = Callable[[int], int]


def c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero), as XLA's offset calculations."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ceil_of_ratio(a: int, b: int) -> int:
    """XLA's ``CeilOfRatio`` on C++ integers."""
    return c_div(a + b - 1, b)


def exchange_halo(shard: int, count: int, left: Offsets, right: Offsets) -> list[int] | None:
    """The element counts along the dimension of each collective-permute
    ``ExchangeHalo`` makes for the left / right halo sizes of shard ``i`` (None: the
    halo is beyond the neighbours, XLA partitions it otherwise)."""
    max_left = max(left(i) for i in range(1, count))
    max_right = max(right(i) for i in range(0, count - 1))
    if (max_left + max_right + shard >= shard * count
            and (max_left > shard or max_right > shard)):
        return None
    left_bound = -max(left(i) for i in range(count))
    right_bound = shard + max(right(i) for i in range(count))
    if left_bound >= right_bound:
        return None
    # The permute ``i`` moves data ``i + 1`` shards over: from as far as the last shard
    # it has no source-target pair, and XLA makes zeros of it instead of a permute.
    halos = []
    i = ceil_of_ratio(max_left, shard) - 1
    while i >= 0 and (-i - 1) * shard < right_bound:
        if i + 1 < count:
            halos.append(min(max_left - shard * i, shard) - max(-i * shard - right_bound, 0))
        i -= 1
    skipped = c_div(min(max(left_bound - shard, 0), max(max_right, 0)), shard)
    for i in range(skipped, min(ceil_of_ratio(max_right, shard), count - 1)):
        halos.append(min(max_right - shard * i, shard) - max(left_bound - (i + 1) * shard, 0))
    return [h for h in halos if h > 0]


@dataclass
class _Piece:
    """A piece of one shard's windowed read (``ExchangeHaloCompact``'s ``Halo``)."""

    reader: int  # the shard reading it
    start: int  # its range inside the shard holding it
    limit: int
    offset: int  # where it lands in the reader's window
    holder: int | None  # the shard holding it; None: padding


def exchange_halo_compact(base: int, shard: int, count: int, left: Offsets,
                          right: Offsets) -> list[int]:
    """The collective-permutes (elements along the dimension) of ``ExchangeHaloCompact``:
    each shard's window cut into pieces of one holder's shard (or padding), padding
    pieces longer than a shard split while others still read data, and every permute
    gathering one piece per holder, at most one per reader, over a range of the
    holder's shard that grows only where pieces overlap or touch."""
    pieces: list[list[_Piece]] = [[] for _ in range(count)]
    for i in range(count):
        begin = i * shard - left(i)
        end = (i + 1) * shard + right(i)
        at = begin
        while at < end:
            size = end - at
            if at < 0 or at >= base:
                if at < 0:
                    size = min(size, -at)
                pieces[i].append(_Piece(i, at % shard, at % shard + size, at - begin, None))
            else:
                size = min(shard - at % shard, size)
                pieces[i].append(_Piece(i, at % shard, at % shard + size, at - begin,
                                        at // shard))
            at += size
    sent: list[list[_Piece]] = [[] for _ in range(count)]  # by holder
    cursor = [0] * count
    while True:
        current = [pieces[i][cursor[i]] for i in range(count) if cursor[i] < len(pieces[i])]
        if not current:
            break
        all_padding = all(p.holder is None for p in current)
        for i in range(count):
            if cursor[i] >= len(pieces[i]):
                continue
            piece = pieces[i][cursor[i]]
            if not all_padding and piece.holder is None and piece.limit > shard:
                piece.start, piece.limit = 0, piece.limit - shard
                continue
            cursor[i] += 1
            if piece.holder is not None and piece.holder != i:
                sent[piece.holder].append(piece)
    for holder in sent:
        holder.sort(key=lambda p: p.offset)
    permutes = []
    cursor = [0] * count
    while True:
        readers: set[int] = set()
        start, limit = shard, 0
        for holder in range(count):
            if cursor[holder] >= len(sent[holder]):
                continue
            piece = sent[holder][cursor[holder]]
            if readers and (piece.reader in readers
                            or (start > piece.limit and limit == shard and piece.start == 0)
                            or (limit < piece.start and start == 0 and piece.limit == shard)):
                continue
            readers.add(piece.reader)
            start, limit = min(start, piece.start), max(limit, piece.limit)
            cursor[holder] += 1
        if not readers:
            return permutes
        permutes.append(limit - start)
