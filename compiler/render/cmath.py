"""C bodies of the math helpers every C-family dialect shares (argument `x`, and `y`).

libm wrappers for float64 and most float32 functions; float32 `exp`, `erf`, `tanh` and
`sigmoid` in straight-line code instead, because a loop calling libm is never vectorized
while these vectorize under `omp simd` (a softmax or gelu row becomes vector code); integer
helpers that follow numpy where C is undefined (wrapping negation, zero divisors).
Templates: `{f}` is the libm suffix, `{T}` the type, `{U}` its unsigned twin.
"""

from __future__ import annotations

FLOAT_MATH = {
    "exp": "return exp{f}(x);",
    "log": "return log{f}(x);",
    "sqrt": "return sqrt{f}(x);",
    "rsqrt": "return 1 / sqrt{f}(x);",
    "tanh": "return tanh{f}(x);",
    "sigmoid": "return 1 / (1 + exp{f}(-x));",
    "erf": "return erf{f}(x);",
    "abs": "return fabs{f}(x);",
    "floor": "return floor{f}(x);",
    "ceil": "return ceil{f}(x);",
    "trunc": "return trunc{f}(x);",
    "pow": "return pow{f}(x, y);",
    "fmod": "return fmod{f}(x, y);",
    "max": "return (x > y || x != x) ? x : y;",
    "min": "return (x < y || x != x) ? x : y;",
}
# float32 exp without libm: Cephes' polynomial (< 1 ulp, subnormals, inf and NaN right) in
# straight-line code that vectorizes under `omp simd`, where a call to expf would not. The
# scale 2^n is applied in two halves so that results underflow gradually.
EXP_F32 = """float c = x > 88.8f ? 88.8f : x < -104.0f ? -104.0f : x;
  float n = (c * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  int32_t e = (int32_t)n, half = e / 2;
  uint32_t b1 = (uint32_t)(half + 127) << 23, b2 = (uint32_t)(e - half + 127) << 23;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
  return x != x ? x : (p * (r * r) + r + 1.0f) * s1 * s2;"""
# erf and tanh (< 3 ulp) the same way: an odd Taylor polynomial near zero, else erfc's
# Chebyshev fit (Numerical Recipes, relative error < 1.2e-7) or tanh through exp, selected
# per lane without branches.
ERF_F32 = """float a = x < 0 ? -x : x, s = x * x;
  float p = -1.4925650358e-05f;
  p = p * s + 1.2055332982e-04f;
  p = p * s + -8.5483270235e-04f;
  p = p * s + 5.2239776254e-03f;
  p = p * s + -2.6866170645e-02f;
  p = p * s + 1.1283791671e-01f;
  p = p * s + -3.7612638903e-01f;
  p = p * s + 1.1283791671e+00f;
  float t = 1.0f / (1.0f + 0.5f * a);
  float q = 0.17087277f;
  q = q * t + -0.82215223f;
  q = q * t + 1.48851587f;
  q = q * t + -1.13520398f;
  q = q * t + 0.27886807f;
  q = q * t + -0.18628806f;
  q = q * t + 0.09678418f;
  q = q * t + 0.37409196f;
  q = q * t + 1.00002368f;
  q = q * t + -1.26551223f;
  float big = 1.0f - t * exp_f32(q - a * a);
  return a < 0.5f ? x * p : x < 0 ? -big : big;"""
TANH_F32 = """float a = x < 0 ? -x : x, s = x * x;
  float p = 5.9002744095e-04f;
  p = p * s + -1.4558343871e-03f;
  p = p * s + 3.5921280366e-03f;
  p = p * s + -8.8632355299e-03f;
  p = p * s + 2.1869488536e-02f;
  p = p * s + -5.3968253968e-02f;
  p = p * s + 1.3333333333e-01f;
  p = p * s + -3.3333333333e-01f;
  float big = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
  return a < 0.55f ? x + x * s * p : x < 0 ? -big : big;"""
FLOAT32_MATH = {
    "exp": EXP_F32,
    "erf": ERF_F32,
    "tanh": TANH_F32,
    "sigmoid": "return 1 / (1 + exp_f32(-x));",
}
SIGNED_MATH = {
    "abs": "return x < 0 ? ({T})(({U})0 - ({U})x) : x;",
    "max": "return x > y ? x : y;",
    "min": "return x < y ? x : y;",
    "div": "return y == 0 ? 0 : y == -1 ? ({T})(({U})0 - ({U})x) : ({T})(x / y);",
    "mod": "return (y == 0 || y == -1) ? 0 : ({T})(x % y);",
}
UNSIGNED_MATH = {
    "abs": "return x;",
    "max": "return x > y ? x : y;",
    "min": "return x < y ? x : y;",
    "div": "return y == 0 ? 0 : ({T})(x / y);",
    "mod": "return y == 0 ? 0 : ({T})(x % y);",
}
BINARY_MATH = ("pow", "fmod", "max", "min", "div", "mod")
UNSIGNED = {"int64": "uint64_t", "int32": "uint32_t", "int16": "uint16_t", "int8": "uint8_t"}
