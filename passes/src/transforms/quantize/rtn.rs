//! Weight quantizers for `quantize`: the [`WeightQuantizer`] interface and
//! round-to-nearest ([`Rtn`]); GPTQ (`gptq.rs`), which also needs the
//! layer's calibration statistics, implements the same interface.

use slmcc_ir::ops::qmatmul::MAX_GROUP;
use slmcc_ir::{DType, Tensor, TensorData};

/// The form of a quantized weight: bits per element and the rows of `K`
/// sharing one scale per output column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// 8 (`i8` values in `-127..=127`) or 4 (`i4` values in `-8..=7`).
    pub bits: u8,
    /// Rows per group; `K` (the weight's row count) is per output channel.
    pub group: usize,
}

/// How `quantize` is asked to round: bits, and the rows per scale (0: per
/// output channel), which each weight narrows to its [`Scheme`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rounding {
    /// 8 or 4.
    pub bits: u8,
    /// Rows of `K` per scale; 0: per output channel.
    pub group: usize,
}

impl Rounding {
    /// The scheme of a weight of `k` rows: the group is `gcd(k, group)`
    /// (the requested group when it divides `k`), or `k` for 0.
    pub fn scheme(&self, k: usize) -> Scheme {
        let group = match self.group {
            0 => k,
            g => gcd(k, g),
        };
        Scheme {
            bits: self.bits,
            group,
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The operands `qmatmul` takes for a weight `w: f32[K, N]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedWeight {
    /// `i8[K, N]` or `i4[K, N]`.
    pub q: Tensor,
    /// `f32[K / group, N]`.
    pub scale: Tensor,
}

/// Turns an `f32[K, N]` weight into `qmatmul` operands.
pub trait WeightQuantizer {
    /// A short name for messages.
    fn name(&self) -> &'static str;
    /// Quantizes the weight of `shape` whose values are `data` (borrowed:
    /// from a mapped file, say) under `scheme`; `Err` explains why it
    /// cannot be.
    fn quantize_values(
        &self,
        shape: &[usize],
        data: &[f32],
        scheme: Scheme,
    ) -> Result<QuantizedWeight, String>;
    /// [`WeightQuantizer::quantize_values`] of `w`, which must be `f32`.
    fn quantize(&self, w: &Tensor, scheme: Scheme) -> Result<QuantizedWeight, String> {
        let data = w
            .as_f32()
            .ok_or_else(|| format!("weight is {}, not f32", w.dtype()))?;
        self.quantize_values(w.shape(), data, scheme)
    }
}

/// Round-to-nearest, symmetric, in `f32`: per group `g` of `group` rows and
/// column `n`, `scale = max |w| / qmax` (`qmax` = 127 for 8 bits, 7 for 4;
/// a zero maximum gives `scale = 1`) and `q = clamp(round_half_even(w /
/// scale), qmin, qmax)` with `qmin` = -127 for 8 bits, -8 for 4. Weights
/// must be finite.
pub struct Rtn;

impl WeightQuantizer for Rtn {
    fn name(&self) -> &'static str {
        "rtn"
    }

    fn quantize_values(
        &self,
        shape: &[usize],
        data: &[f32],
        scheme: Scheme,
    ) -> Result<QuantizedWeight, String> {
        let ((k, n), data, levels) = checked(shape, data, scheme)?;
        let g = scheme.group;
        let groups = k / g;
        // Row-major passes (cache-friendly for wide weights), over blocks of
        // rows on all cores: per group the column maxima (each block's
        // partial maxima, merged: the same maxima in any order), then the
        // scales, then each row. The result does not depend on the blocks.
        let partial = for_row_blocks(k, |rows| {
            let mut m = vec![0f32; groups * n];
            for r in rows {
                let gi = r / g;
                for (m, v) in m[gi * n..(gi + 1) * n]
                    .iter_mut()
                    .zip(&data[r * n..(r + 1) * n])
                {
                    *m = m.max(v.abs());
                }
            }
            m
        });
        let mut scale = vec![0f32; groups * n];
        for m in partial {
            for (s, v) in scale.iter_mut().zip(m) {
                *s = s.max(v);
            }
        }
        for m in scale.iter_mut() {
            *m = levels.scale(*m);
        }
        let mut q = vec![0i8; k * n];
        for_row_blocks_mut(&mut q, n, |rows, out| {
            for (r, dst) in rows.zip(out.chunks_exact_mut(n)) {
                let s = &scale[(r / g) * n..(r / g + 1) * n];
                for ((d, &v), &s) in dst.iter_mut().zip(&data[r * n..(r + 1) * n]).zip(s) {
                    *d = levels.round(v, s);
                }
            }
        });
        pack(levels.dtype, (k, n), q, scale)
    }
}

/// The threads to use for a weight of `rows` rows: the cores, at most one
/// per 64 rows (a small weight is not worth a thread).
fn threads_for(rows: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(rows.div_ceil(64))
        .max(1)
}

/// `f` over contiguous blocks of `0..rows`, one per thread; the results in
/// block order.
pub(super) fn for_row_blocks<T: Send>(
    rows: usize,
    f: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Vec<T> {
    let threads = threads_for(rows);
    let per = rows.div_ceil(threads).max(1);
    let blocks: Vec<std::ops::Range<usize>> = (0..rows)
        .step_by(per)
        .map(|a| a..(a + per).min(rows))
        .collect();
    if blocks.len() <= 1 {
        return blocks.into_iter().map(&f).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = blocks
            .into_iter()
            .map(|b| {
                let f = &f;
                s.spawn(move || f(b))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a quantizer thread panicked"))
            .collect()
    })
}

/// `f(rows, out_rows)` over contiguous blocks of the rows of `out` (rows of
/// `n` values), one per thread.
fn for_row_blocks_mut<T: Send>(
    out: &mut [T],
    n: usize,
    f: impl Fn(std::ops::Range<usize>, &mut [T]) + Sync,
) {
    let rows = out.len() / n.max(1);
    let per = rows.div_ceil(threads_for(rows)).max(1);
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(per * n.max(1)).enumerate() {
            let f = &f;
            let first = i * per;
            s.spawn(move || f(first..first + chunk.len() / n.max(1), chunk));
        }
    });
}

/// A weight checked for quantizing: its `[K, N]` shape, its values and
/// the levels of the scheme's bits.
pub(super) type Checked<'a> = ((usize, usize), &'a [f32], Levels);

/// A weight of `shape` whose values are `data`, as every quantizer checks
/// it: `[K, N]`, finite, and `K` a multiple of the scheme's group (at most
/// [`MAX_GROUP`]).
pub(super) fn checked<'a>(
    shape: &[usize],
    data: &'a [f32],
    scheme: Scheme,
) -> Result<Checked<'a>, String> {
    let [k, n] = *shape else {
        return Err(format!("weight of shape {shape:?} is not 2-D"));
    };
    if data.len() != k * n {
        return Err(format!("{} values for shape {shape:?}", data.len()));
    }
    let g = scheme.group;
    if g == 0 || g as i64 > MAX_GROUP || k % g != 0 {
        return Err(format!("K = {k} is not a multiple of group = {g}"));
    }
    let levels = Levels::of(scheme.bits)?;
    let finite = for_row_blocks(k, |rows| {
        data[rows.start * n..rows.end * n]
            .iter()
            .all(|v| v.is_finite())
    });
    if finite.contains(&false) {
        return Err("weight has non-finite values".to_string());
    }
    Ok(((k, n), data, levels))
}

/// The stored type and the value range of `bits`-bit weights, and the
/// rounding every quantizer shares.
#[derive(Clone, Copy, Debug)]
pub(super) struct Levels {
    pub dtype: DType,
    qmin: f32,
    qmax: f32,
}

impl Levels {
    pub(super) fn of(bits: u8) -> Result<Levels, String> {
        let (dtype, qmin, qmax) = match bits {
            8 => (DType::I8, -127.0, 127.0),
            4 => (DType::I4, -8.0, 7.0),
            b => return Err(format!("{b}-bit weights are not supported (4 or 8)")),
        };
        Ok(Levels { dtype, qmin, qmax })
    }

    /// The scale of a group whose largest magnitude is `max`: `max /
    /// qmax`, or 1 when the group is all zeros.
    pub(super) fn scale(&self, max: f32) -> f32 {
        if max == 0.0 {
            1.0
        } else {
            max / self.qmax
        }
    }

    /// The stored value of `v` at scale `s`: `clamp(round_half_even(v /
    /// s))`.
    pub(super) fn round(&self, v: f32, s: f32) -> i8 {
        round_half_even(v / s).clamp(self.qmin, self.qmax) as i8
    }
}

/// `qmatmul`'s operands from row-major `[K, N]` values `q` (in range for
/// `dtype`, `i8` or `i4`, which the IR holds one value per `i8` alike) and
/// the `[K / group, N]` scales.
pub(super) fn pack(
    dtype: DType,
    (k, n): (usize, usize),
    q: Vec<i8>,
    scale: Vec<f32>,
) -> Result<QuantizedWeight, String> {
    let groups = scale.len() / n.max(1);
    let data = match dtype {
        DType::I4 => TensorData::I4(q),
        DType::I8 => TensorData::I8(q),
        other => return Err(format!("{other} is not a quantized weight type")),
    };
    let q = Tensor::new(vec![k, n], data).map_err(|e| e.to_string())?;
    Ok(QuantizedWeight {
        q,
        scale: Tensor::from_f32(vec![groups, n], scale),
    })
}

/// `x.round_ties_even()` for `|x| <= 2^22` (here `|w / scale| <= qmax`
/// up to rounding): adding and removing 2^23 rounds to an integer in the
/// current (nearest-even) mode, without the libm call `round_ties_even`
/// becomes on x86-64's baseline.
fn round_half_even(x: f32) -> f32 {
    const MAGIC: f32 = 8_388_608.0; // 2^23
    debug_assert!(x.abs() <= MAGIC / 2.0);
    ((x.abs() + MAGIC) - MAGIC).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_per_channel() {
        // Column 0: max |w| = 2.54, scale = 0.02, q = [127, -64]
        // (-1.27 / 0.02 = -63.5, half to even); column 1 is zero: scale 1.
        let w = Tensor::from_f32(vec![2, 2], vec![2.54, 0.0, -1.27, 0.0]);
        let qw = Rtn.quantize(&w, Scheme { bits: 8, group: 2 }).unwrap();
        assert_eq!(qw.q.dtype(), DType::I8);
        let s = 2.54f32 / 127.0;
        assert_eq!(qw.scale.as_f32().unwrap(), &[s, 1.0]);
        let want = [
            (2.54f32 / s).round_ties_even(),
            0.0,
            (-1.27f32 / s).round_ties_even(),
            0.0,
        ];
        let got: Vec<f32> = qw.q.to_i64_vec().iter().map(|&v| v as f32).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn int4_groups() {
        // Two groups of one row: scales max/7; -7 / 1 = -7, 3.5/0.5 = 7.
        let w = Tensor::from_f32(vec![2, 1], vec![-7.0, 3.5]);
        let qw = Rtn.quantize(&w, Scheme { bits: 4, group: 1 }).unwrap();
        assert_eq!(qw.q.dtype(), DType::I4);
        assert_eq!(qw.scale.as_f32().unwrap(), &[1.0, 0.5]);
        assert_eq!(qw.q.to_i64_vec(), vec![-7, 7]);
    }

    #[test]
    fn int4_odd_count_packs_and_rounds_each_element() {
        // 3 x 3, one group: an odd element count leaves a high nibble unused.
        let data: Vec<f32> = (0..9).map(|i| (i as f32 - 4.0) * 0.37).collect();
        let w = Tensor::from_f32(vec![3, 3], data.clone());
        let qw = Rtn.quantize(&w, Scheme { bits: 4, group: 3 }).unwrap();
        let s = qw.scale.as_f32().unwrap().to_vec();
        let want: Vec<i64> = data
            .iter()
            .enumerate()
            .map(|(i, v)| (v / s[i % 3]).round_ties_even().clamp(-8.0, 7.0) as i64)
            .collect();
        assert_eq!(qw.q.to_i64_vec(), want);
        assert!(want.iter().any(|&v| v < 0) && want.iter().any(|&v| v > 0));
    }

    #[test]
    fn rounding_matches_round_ties_even() {
        for i in -2_000_000..2_000_000 {
            let x = i as f32 * 0.25 + 0.125 * (i % 3) as f32;
            assert_eq!(
                round_half_even(x).to_bits(),
                x.round_ties_even().to_bits(),
                "{x}"
            );
        }
        for x in [
            0.5f32, 1.5, 2.5, -0.5, -2.5, 127.49999, 4194303.5, -0.0, 0.0,
        ] {
            assert_eq!(
                round_half_even(x).to_bits(),
                x.round_ties_even().to_bits(),
                "{x}"
            );
        }
    }

    #[test]
    fn rejects_bad_weights() {
        let w = Tensor::from_f32(vec![3, 1], vec![1.0, f32::NAN, 0.0]);
        let e = |w: &Tensor, bits, group| Rtn.quantize(w, Scheme { bits, group }).unwrap_err();
        assert!(e(&w, 8, 3).contains("non-finite"));
        assert!(e(&w, 4, 2).contains("not a multiple of group = 2"));
        assert!(e(&w, 2, 3).contains("not supported"));
        let v = Tensor::from_f32(vec![3], vec![0.0; 3]);
        assert!(e(&v, 8, 3).contains("not 2-D"));
    }
}
