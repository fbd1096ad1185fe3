/*
 * slmcc_math.c - the math helpers an slmcc AOT kernel object imports
 * (`slmcc_expf`, ...), for a C runtime on the board or under qemu.
 *
 * `backends/src/cpu/math.rs` is the definition: each helper here computes
 * exactly what the host helper of the same name computes, so a kernel
 * object linked with this file gives the host's results.
 *
 *  - `expf`, `logf`, `tanhf`, `cosf`, `sinf`, `powf`, `fmodf` (and `pow`
 *    in double) are the C library's, as on the host (Rust's float methods
 *    call them on Linux).
 *  - `erff` is *not* the C library's: the host uses the `libm` crate's
 *    port of FreeBSD msun `s_erff.c`, which calls msun's own `expf`
 *    (`e_expf.c`). Both are reproduced below, operation for operation.
 *  - sigmoid, GELU and the ONNX `Mod` are the compositions the reference
 *    evaluation uses (`ir/src/ops/fused_util.rs`, `ir/src/ops/gelu.rs`).
 *
 * Rust never contracts `a * b + c` into a fused multiply-add; GCC does on
 * aarch64 unless told not to, so compile with `-ffp-contract=off`. Every
 * literal is a `float` (`f` suffix): no step is evaluated in double.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t to_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/*
 * msun_expf and msun_erff below follow FreeBSD msun's e_expf.c and s_erff.c
 * (float conversion by Ian Lance Taylor, Cygnus Support), as the Rust `libm`
 * crate ports them; their notice:
 *
 * ====================================================
 * Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
 *
 * Developed at SunPro, a Sun Microsystems, Inc. business.
 * Permission to use, copy, modify, and distribute this
 * software is freely granted, provided that this notice
 * is preserved.
 * ====================================================
 */

/* msun e_expf.c, as the `libm` crate 0.2 has it (only `erff` uses it). */
static float msun_expf(float x) {
    static const float half[2] = {0.5f, -0.5f};
    const float ln2_hi = 6.9314575195e-01f; /* 0x3f317200 */
    const float ln2_lo = 1.4286067653e-06f; /* 0x35bfbe8e */
    const float inv_ln2 = 1.4426950216e+00f; /* 0x3fb8aa3b */
    const float p1 = 1.6666625440e-1f;  /*  0xaaaa8f.0p-26 */
    const float p2 = -2.7667332906e-3f; /* -0xb55215.0p-32 */
    const float x1p127 = from_bits(0x7f000000);
    uint32_t hx = to_bits(x);
    int sign = (int)(hx >> 31);
    int k;
    float hi, lo, xx, c, y;

    hx &= 0x7fffffff;
    if (hx >= 0x42aeac50) { /* |x| >= 87.33655 or NaN */
        if (hx > 0x7f800000) /* NaN */
            return x;
        if (hx >= 0x42b17218 && !sign) /* x >= 88.722839: overflow */
            return x * x1p127;
        if (sign && hx >= 0x42cff1b5) /* x <= -103.972084: underflow */
            return 0.0f;
    }
    if (hx > 0x3eb17218) { /* |x| > 0.5 ln2 */
        if (hx > 0x3f851592) /* |x| > 1.5 ln2 */
            k = (int)(inv_ln2 * x + half[sign]);
        else
            k = 1 - sign - sign;
        float kf = (float)k;
        hi = x - kf * ln2_hi;
        lo = kf * ln2_lo;
        x = hi - lo;
    } else if (hx > 0x39000000) { /* |x| > 2**-14 */
        k = 0;
        hi = x;
        lo = 0.0f;
    } else {
        return 1.0f + x;
    }
    xx = x * x;
    c = x - xx * (p1 + xx * p2);
    y = 1.0f + (x * c / (2.0f - c) - lo + hi);
    /* `scalbnf` is exact (one rounding), as the crate's is. */
    return k == 0 ? y : scalbnf(y, k);
}

/* msun s_erff.c, as the `libm` crate 0.2 has it. */
static const float erx = 8.4506291151e-01f;
static const float efx8 = 1.0270333290e+00f;
static const float pp0 = 1.2837916613e-01f, pp1 = -3.2504209876e-01f,
                   pp2 = -2.8481749818e-02f, pp3 = -5.7702702470e-03f,
                   pp4 = -2.3763017452e-05f;
static const float qq1 = 3.9791721106e-01f, qq2 = 6.5022252500e-02f,
                   qq3 = 5.0813062117e-03f, qq4 = 1.3249473704e-04f,
                   qq5 = -3.9602282413e-06f;
static const float pa0 = -2.3621185683e-03f, pa1 = 4.1485610604e-01f,
                   pa2 = -3.7220788002e-01f, pa3 = 3.1834661961e-01f,
                   pa4 = -1.1089469492e-01f, pa5 = 3.5478305072e-02f,
                   pa6 = -2.1663755178e-03f;
static const float qa1 = 1.0642088205e-01f, qa2 = 5.4039794207e-01f,
                   qa3 = 7.1828655899e-02f, qa4 = 1.2617121637e-01f,
                   qa5 = 1.3637083583e-02f, qa6 = 1.1984500103e-02f;
static const float ra0 = -9.8649440333e-03f, ra1 = -6.9385856390e-01f,
                   ra2 = -1.0558626175e+01f, ra3 = -6.2375331879e+01f,
                   ra4 = -1.6239666748e+02f, ra5 = -1.8460508728e+02f,
                   ra6 = -8.1287437439e+01f, ra7 = -9.8143291473e+00f;
static const float sa1 = 1.9651271820e+01f, sa2 = 1.3765776062e+02f,
                   sa3 = 4.3456588745e+02f, sa4 = 6.4538726807e+02f,
                   sa5 = 4.2900814819e+02f, sa6 = 1.0863500214e+02f,
                   sa7 = 6.5702495575e+00f, sa8 = -6.0424413532e-02f;
static const float rb0 = -9.8649431020e-03f, rb1 = -7.9928326607e-01f,
                   rb2 = -1.7757955551e+01f, rb3 = -1.6063638306e+02f,
                   rb4 = -6.3756646729e+02f, rb5 = -1.0250950928e+03f,
                   rb6 = -4.8351919556e+02f;
static const float sb1 = 3.0338060379e+01f, sb2 = 3.2579251099e+02f,
                   sb3 = 1.5367296143e+03f, sb4 = 3.1998581543e+03f,
                   sb5 = 2.5530502930e+03f, sb6 = 4.7452853394e+02f,
                   sb7 = -2.2440952301e+01f;

static float erfc1(float x) {
    float s = fabsf(x) - 1.0f;
    float p = pa0 + s * (pa1 + s * (pa2 + s * (pa3 + s * (pa4 + s * (pa5 + s * pa6)))));
    float q = 1.0f + s * (qa1 + s * (qa2 + s * (qa3 + s * (qa4 + s * (qa5 + s * qa6)))));
    return 1.0f - erx - p / q;
}

static float erfc2(uint32_t ix, float x) {
    float s, r, big_s, z;
    if (ix < 0x3fa00000) /* |x| < 1.25 */
        return erfc1(x);
    x = fabsf(x);
    s = 1.0f / (x * x);
    if (ix < 0x4036db6d) { /* |x| < 1/0.35 */
        r = ra0 + s * (ra1 + s * (ra2 + s * (ra3 + s * (ra4 + s * (ra5 + s * (ra6 + s * ra7))))));
        big_s = 1.0f + s * (sa1 + s * (sa2 + s * (sa3 + s * (sa4 + s * (sa5 + s * (sa6 + s * (sa7 + s * sa8)))))));
    } else { /* |x| >= 1/0.35 */
        r = rb0 + s * (rb1 + s * (rb2 + s * (rb3 + s * (rb4 + s * (rb5 + s * rb6)))));
        big_s = 1.0f + s * (sb1 + s * (sb2 + s * (sb3 + s * (sb4 + s * (sb5 + s * (sb6 + s * sb7))))));
    }
    z = from_bits(to_bits(x) & 0xffffe000);
    return msun_expf(-z * z - 0.5625f) * msun_expf((z - x) * (z + x) + r / big_s) / x;
}

static float msun_erff(float x) {
    uint32_t ix = to_bits(x);
    int sign = (int)(ix >> 31);
    float r, s, z, y;

    ix &= 0x7fffffff;
    if (ix >= 0x7f800000) /* erf(nan) = nan, erf(+-inf) = +-1 */
        return 1.0f - 2.0f * (float)sign + 1.0f / x;
    if (ix < 0x3f580000) { /* |x| < 0.84375 */
        if (ix < 0x31800000) /* |x| < 2**-28 */
            return 0.125f * (8.0f * x + efx8 * x);
        z = x * x;
        r = pp0 + z * (pp1 + z * (pp2 + z * (pp3 + z * pp4)));
        s = 1.0f + z * (qq1 + z * (qq2 + z * (qq3 + z * (qq4 + z * qq5))));
        y = r / s;
        return x + x * y;
    }
    if (ix < 0x40c00000) /* |x| < 6 */
        y = 1.0f - erfc2(ix, x);
    else
        y = 1.0f - from_bits(0x03800000); /* 1 - 2**-120 */
    return sign ? -y : y;
}

float slmcc_expf(float x) { return expf(x); }

float slmcc_logf(float x) { return logf(x); }

float slmcc_erff(float x) { return msun_erff(x); }

float slmcc_tanhf(float x) { return tanhf(x); }

float slmcc_sigmoidf(float x) {
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

float slmcc_cosf(float x) { return cosf(x); }

float slmcc_sinf(float x) { return sinf(x); }

float slmcc_powf(float a, float b) { return powf(a, b); }

/* Float `mod` with the sign of the divisor (ONNX `Mod`, `fmod = 0`). */
float slmcc_modf(float a, float b) {
    float r = fmodf(a, b);
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f)))
        return r + b;
    return r;
}

/* 0.5 x (1 + erf(x / sqrt 2)) */
float slmcc_gelu_erff(float x) {
    const float sqrt_2 = 1.41421356237309504880f;
    return 0.5f * x * (1.0f + msun_erff(x / sqrt_2));
}

/* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
float slmcc_gelu_tanhf(float x) {
    const float two_over_sqrt_pi = 1.12837916709551257390f;
    const float one_over_sqrt_2 = 0.707106781186547524401f;
    float k = two_over_sqrt_pi * one_over_sqrt_2;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* `pow` in double (the reference's integer `pow`). */
double slmcc_pow(double a, double b) { return pow(a, b); }
