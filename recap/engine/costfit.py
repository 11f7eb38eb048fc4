"""The cost curve's smoothing: ``t(b) = a + c1 b + c2 b^2`` through measured pass seconds, least squares in
relative error (one concept: the load-time curve, ``recap.engine.autobudget``, and the size loop's
refits, ``recap.engine.controller``, both read a curve through it)."""

from __future__ import annotations


def fit_verify(curve: dict[int, float]) -> tuple[float, float, float]:
    """Smooth a measured curve: t(b) = a + c1 * b + c2 * b**2, least squares in relative error.

    A fit rather than interpolation, so that one noisy point (a shared CPU) cannot move
    the choice; c1 and c2 are kept non-negative (a bigger tree never verifies faster).
    """
    # The normal equations in plain Python (the size loop refits in a decode; numpy's least squares took
    # ~250 us there, its caches cold after a forward): moments of the weights w = 1 / t^2.
    s, r = [0.0] * 5, [0.0] * 3  # s[k] = sum w b^k, r[k] = sum w t b^k
    for b, t in curve.items():
        w, p = 1.0 / max(t, 1e-9) ** 2, 1.0
        for k in range(5):
            s[k] += w * p
            if k < 3:
                r[k] += w * t * p
            p *= b
    coef = [0.0, 0.0, 0.0]
    for cols in range(min(3, len(curve)), 0, -1):  # no more terms than points: an exact, unique fit
        solved = _solve([[s[i + j] for j in range(cols)] for i in range(cols)], r[:cols])
        if solved is None:
            continue
        coef = solved + [0.0] * (3 - cols)
        if cols == 1 or (coef[1] >= 0 and coef[2] >= 0):
            break
    a, c1, c2 = coef
    return max(a, 0.0), max(c1, 0.0), max(c2, 0.0)


def _solve(m: list[list[float]], v: list[float]) -> list[float] | None:
    """x with m x = v (at most 3 x 3), Gaussian elimination with partial pivoting; None if singular."""
    n = len(v)
    m, v = [row[:] for row in m], v[:]
    for i in range(n):
        pivot = max(range(i, n), key=lambda k: abs(m[k][i]))
        if abs(m[pivot][i]) <= 1e-12 * max(1.0, max(abs(x) for row in m for x in row)):
            return None
        m[i], m[pivot], v[i], v[pivot] = m[pivot], m[i], v[pivot], v[i]
        for k in range(i + 1, n):
            f = m[k][i] / m[i][i]
            for j in range(i, n):
                m[k][j] -= f * m[i][j]
            v[k] -= f * v[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (v[i] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x
