"""The cells of the combination matrix: a greedy pairwise covering array over the factors.

Every pair of levels of two factors appears in at least one cell. Cells that train are
built greedily (each next factor takes the level that covers most uncovered pairs) and
never hold a refused combination; each pair the declarations refuse gets a cell of its own,
the pair with every other factor plain, which asserts the refusal. Deterministic: the same
declarations give the same cells.
"""

import itertools

from mgpu_tf.comm import combinations

__all__ = ["cells", "pairs", "name"]


def pairs(cell):
    """The pairs of (factor, level) a cell holds."""
    items = sorted((f, repr(v)) for f, v in cell.items())
    return set(itertools.combinations(items, 2))


def _refused(cell):
    return combinations.outcome(cell) == combinations.Outcome.REFUSED


def _all_pairs():
    factors = sorted(combinations.FACTORS)
    return {((a, repr(x)), (b, repr(y)))
            for a, b in itertools.combinations(factors, 2)
            for x in combinations.FACTORS[a] for y in combinations.FACTORS[b]}


def _value(factor, text):
    return next(v for v in combinations.FACTORS[factor] if repr(v) == text)


def cells():
    """The matrix: a list of full cells (every factor set), training ones first."""
    plain = combinations.PLAIN
    uncovered = _all_pairs()
    refused = {p for p in uncovered if all(
        _refused({**plain, "strategy": s, **{f: _value(f, v) for f, v in p}})
        for s in combinations.FACTORS["strategy"])}
    uncovered -= refused
    out = []
    while uncovered:
        (a, x), (b, y) = min(uncovered)
        cell = {a: _value(a, x), b: _value(b, y)}
        for factor in combinations.FACTORS:
            if factor in cell:
                continue
            best, gain = None, -1
            for level in combinations.FACTORS[factor]:
                trial = {**cell, factor: level}
                if _refused({**plain, **trial}):
                    continue
                new = len(pairs(trial) & uncovered)
                if new > gain:
                    best, gain = level, new
            cell[factor] = best
        cell = {f: cell[f] for f in combinations.FACTORS}
        assert not _refused(cell), cell
        out.append(cell)
        uncovered -= pairs(cell)
    for pair in sorted(refused):
        out.append(_refusal_cell({f: _value(f, v) for f, v in pair}))
    return out


def _refusal_cell(pair):
    """The pair with every other factor plain, under the first strategy whose refusal is the
    pair's own (a rule naming both factors), else the first that refuses it."""
    plain = combinations.PLAIN
    options = [{**plain, "strategy": s, **pair} for s in combinations.FACTORS["strategy"]]
    refused = [c for c in options if _refused(c)]
    own = [c for c in refused
           if set(pair) - {"strategy"} <= set(combinations.deciding_rule(c).when)]
    return (own or refused)[0]


def name(cell):
    """A short test id: the factors off their plain level."""
    plain = combinations.PLAIN
    return ",".join([cell["strategy"]] + [f"{f}={v}" for f, v in cell.items()
                                          if f != "strategy" and v != plain[f]])
