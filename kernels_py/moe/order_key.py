"""The int32 order key of a float32 score, shared by the routing kernels that rank groups.

``key(x)``: a larger float has a larger key; -0.0 and +0.0 share one key (they tie, as torch's
sort ties them); every NaN is INT32_MAX, above +inf's key (torch's sort puts NaN first in a
descending order). Integer compares and min/max then rank scores with torch's rules, and
``value`` turns a key back into its float (INT32_MAX into a NaN).
"""

INT_MAX, INT_MIN = 0x7FFFFFFF, -0x80000000  # INT_MIN: below every key, key(-inf) included


def key(x):
    """x's int32 order key (a TIR expression; x a float32 expression)."""
    import tilelang.language as T

    b = T.reinterpret(T.ieee_add(x, T.float32(0)), "int32")  # -0 + 0 = +0
    return T.if_then_else(T.isnan(x), INT_MAX, b ^ ((b >> 31) & INT_MAX))


def value(k):
    """The float32 a key stands for (INT32_MAX: a NaN)."""
    import tilelang.language as T

    return T.reinterpret(k ^ ((k >> 31) & INT_MAX), "float32")
