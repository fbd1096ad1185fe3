//! The exact integer arithmetic of the NPU ISA (`docs/NPU_ISA.md`,
//! "Arithmetic"): gemmlowp's saturating rounding doubling high multiply,
//! rounding divide by a power of two, requantization with a fixed-point
//! multiplier and a shift, and saturation to INT8. Pure functions, total
//! on their domains; the shift range is checked by the caller.

/// `floor((a·b + 2^30) / 2^31)`, i.e. `a·b / 2^31` rounded to nearest
/// with ties toward +∞ (gemmlowp's nudge-and-truncate), saturating the one
/// overflowing case (`i32::MIN · i32::MIN`) to `i32::MAX`.
pub fn srdhm(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    // |ab + nudge| < 2^62, and the quotient fits i32 except for the case
    // handled above.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// `x / 2^e` rounded to nearest, ties away from zero (`0 <= e <= 31`).
pub fn rdbpot(x: i32, e: u32) -> i32 {
    let e = e.min(31);
    let mask: i32 = ((1i64 << e) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(remainder > threshold)
}

/// Requantization: for `rshift >= 0`, `rdbpot(srdhm(x, mult), rshift)`;
/// for `rshift < 0`, `x` is first shifted left by `-rshift` saturating to
/// INT32, then `srdhm(x, mult)`. `rshift` must be in `-31..=31`.
pub fn requant(x: i32, mult: i32, rshift: i8) -> i32 {
    if rshift < 0 {
        let l = u32::from(rshift.unsigned_abs()).min(31);
        let wide = i64::from(x) << l;
        let x = wide.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        srdhm(x, mult)
    } else {
        rdbpot(srdhm(x, mult), u32::from(rshift as u8))
    }
}

/// Whether `rshift` is a valid requantization shift.
pub fn shift_ok(rshift: i8) -> bool {
    (-31..=31).contains(&rshift)
}

/// Saturation of an INT32 to INT8.
pub fn sat8(x: i32) -> i8 {
    x.clamp(-128, 127) as i8
}

/// A signed 4-bit weight: element `e` of a packed INT4 array (two per
/// byte, low nibble first).
pub fn int4_at(bytes: &[u8], e: usize) -> i8 {
    let b = bytes[e / 2];
    let nib = if e.is_multiple_of(2) {
        b & 0x0f
    } else {
        b >> 4
    };
    ((nib << 4) as i8) >> 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srdhm_cases() {
        assert_eq!(srdhm(i32::MIN, i32::MIN), i32::MAX);
        assert_eq!(srdhm(1 << 30, 1 << 30), 1 << 29);
        // 3 · 2^30 / 2^31 = 1.5 → 2 and -1.5 → -1 (ties toward +∞).
        assert_eq!(srdhm(3, 1 << 30), 2);
        assert_eq!(srdhm(-3, 1 << 30), -1);
        assert_eq!(srdhm(1, 1 << 30), 1);
        assert_eq!(srdhm(-1, 1 << 30), 0);
        assert_eq!(srdhm(-5, 1 << 29), -1);
    }

    #[test]
    fn rdbpot_cases() {
        assert_eq!(rdbpot(5, 1), 3);
        assert_eq!(rdbpot(-5, 1), -3);
        assert_eq!(rdbpot(6, 2), 2);
        assert_eq!(rdbpot(-6, 2), -2);
        assert_eq!(rdbpot(7, 0), 7);
        assert_eq!(rdbpot(i32::MIN, 31), -1);
        assert_eq!(rdbpot(i32::MAX, 31), 1);
    }

    #[test]
    fn requant_and_int4() {
        // Multiplier 0.5 (2^30) and a right shift of 2: x/8, rounded.
        assert_eq!(requant(100, 1 << 30, 2), 13);
        assert_eq!(requant(-100, 1 << 30, 2), -13);
        // Left shift saturates before the multiply.
        assert_eq!(requant(i32::MAX, 1 << 30, -4), 1 << 30);
        assert_eq!(sat8(300), 127);
        assert_eq!(sat8(-300), -128);
        let packed = [0x8f_u8, 0x71];
        assert_eq!([0, 1, 2, 3].map(|e| int4_at(&packed, e)), [-1, -8, 1, 7]);
    }
}
