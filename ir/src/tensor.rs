//! Concrete tensors: a static shape and a typed buffer.
//!
//! Used for constants, weights brought into memory, constant folding and the
//! reference evaluation of ops. Sub-byte types are held unpacked, one element
//! per `i8`/`u8`; [`Tensor::to_le_bytes`] and [`Tensor::from_le_bytes`] pack
//! them two per byte, low nibble first.

use half::{bf16, f16};

use crate::dtype::DType;

/// The typed element buffer of a [`Tensor`].
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    /// Values in `-8..=7`.
    I4(Vec<i8>),
    /// Values in `0..=15`.
    U4(Vec<u8>),
    Bool(Vec<bool>),
}

/// Applies `$body` to the vector inside any [`TensorData`] variant.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::F32($v) => $body,
            TensorData::F16($v) => $body,
            TensorData::BF16($v) => $body,
            TensorData::I64($v) => $body,
            TensorData::I32($v) => $body,
            TensorData::I8($v) => $body,
            TensorData::U8($v) => $body,
            TensorData::I4($v) => $body,
            TensorData::U4($v) => $body,
            TensorData::Bool($v) => $body,
        }
    };
}

impl TensorData {
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::I64(_) => DType::I64,
            TensorData::I32(_) => DType::I32,
            TensorData::I8(_) => DType::I8,
            TensorData::U8(_) => DType::U8,
            TensorData::I4(_) => DType::I4,
            TensorData::U4(_) => DType::U4,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gathers elements by index into a new buffer of the same dtype.
    pub fn gather(&self, indices: impl Iterator<Item = usize>) -> TensorData {
        macro_rules! pick {
            ($($variant:ident),*) => {
                match self { $(TensorData::$variant(v) => TensorData::$variant(indices.map(|i| v[i]).collect()),)* }
            };
        }
        pick!(F32, F16, BF16, I64, I32, I8, U8, I4, U4, Bool)
    }

    /// Concatenates buffers; `None` when they are not all of one dtype.
    pub fn concat(parts: &[&TensorData]) -> Option<TensorData> {
        macro_rules! cat {
            ($($variant:ident),*) => {
                match parts.first()? {
                    $(TensorData::$variant(_) => {
                        let mut out = Vec::new();
                        for p in parts {
                            let TensorData::$variant(v) = p else { return None };
                            out.extend_from_slice(v);
                        }
                        TensorData::$variant(out)
                    })*
                }
            };
        }
        Some(cat!(F32, F16, BF16, I64, I32, I8, U8, I4, U4, Bool))
    }

    pub fn zeros(dtype: DType, n: usize) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(vec![0.0; n]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; n]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; n]),
            DType::I64 => TensorData::I64(vec![0; n]),
            DType::I32 => TensorData::I32(vec![0; n]),
            DType::I8 => TensorData::I8(vec![0; n]),
            DType::U8 => TensorData::U8(vec![0; n]),
            DType::I4 => TensorData::I4(vec![0; n]),
            DType::U4 => TensorData::U4(vec![0; n]),
            DType::Bool => TensorData::Bool(vec![false; n]),
        }
    }
}

/// A tensor with a static shape and owned data.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// Error for a buffer whose length disagrees with its shape.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("tensor of shape {shape:?} needs {expected} elements, buffer has {actual}")]
pub struct ShapeMismatch {
    pub shape: Vec<usize>,
    pub expected: usize,
    pub actual: usize,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor, ShapeMismatch> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(ShapeMismatch {
                shape,
                expected,
                actual: data.len(),
            });
        }
        Ok(Tensor { shape, data })
    }

    pub fn from_f32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor::new(shape, TensorData::F32(v)).expect("from_f32: length matches shape")
    }

    pub fn from_i64(shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        Tensor::new(shape, TensorData::I64(v)).expect("from_i64: length matches shape")
    }

    pub fn from_bool(shape: Vec<usize>, v: Vec<bool>) -> Tensor {
        Tensor::new(shape, TensorData::Bool(v)).expect("from_bool: length matches shape")
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor::from_f32(Vec::new(), vec![v])
    }

    pub fn scalar_i64(v: i64) -> Tensor {
        Tensor::from_i64(Vec::new(), vec![v])
    }

    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape,
            data: TensorData::zeros(dtype, n),
        }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// The same data under another shape with the same element count.
    pub fn reshaped(self, shape: Vec<usize>) -> Result<Tensor, ShapeMismatch> {
        Tensor::new(shape, self.data)
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            TensorData::I64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<&[bool]> {
        match &self.data {
            TensorData::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// Element `i` widened to `f64` (booleans as 0/1).
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            TensorData::F32(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::I64(v) => v[i] as f64,
            TensorData::I32(v) => v[i] as f64,
            TensorData::I8(v) | TensorData::I4(v) => v[i] as f64,
            TensorData::U8(v) | TensorData::U4(v) => v[i] as f64,
            TensorData::Bool(v) => v[i] as u8 as f64,
        }
    }

    /// Element `i` as an integer (floats truncated toward zero).
    pub fn get_i64(&self, i: usize) -> i64 {
        match &self.data {
            TensorData::I64(v) => v[i],
            TensorData::I32(v) => v[i] as i64,
            TensorData::I8(v) | TensorData::I4(v) => v[i] as i64,
            TensorData::U8(v) | TensorData::U4(v) => v[i] as i64,
            TensorData::Bool(v) => v[i] as i64,
            _ => self.get_f64(i) as i64,
        }
    }

    /// All elements as `f32` (integers converted, booleans as 0/1).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            TensorData::F32(v) => v.clone(),
            _ => (0..self.len()).map(|i| self.get_f64(i) as f32).collect(),
        }
    }

    /// All elements as `i64`.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        (0..self.len()).map(|i| self.get_i64(i)).collect()
    }

    /// Converts to another dtype with ONNX `Cast` semantics: floats to
    /// integers truncate toward zero and saturate, numbers to bool are `!= 0`,
    /// 4-bit targets clamp to their range; 16-bit floats are rounded to
    /// nearest even from the value as `f32`, on every host.
    pub fn cast(&self, to: DType) -> Tensor {
        if to == self.dtype() {
            return self.clone();
        }
        let n = self.len();
        let from_float = self.dtype().is_float();
        let int = |i: usize| -> i64 {
            if from_float {
                let f = self.get_f64(i);
                if f.is_nan() {
                    0
                } else {
                    f as i64
                }
            } else {
                self.get_i64(i)
            }
        };
        let data = match to {
            DType::F32 => TensorData::F32((0..n).map(|i| self.get_f64(i) as f32).collect()),
            // Through `f32` (exact for floats, how integers become floats),
            // then rounded once to nearest even: `half`'s `from_f64` drops
            // low bits before rounding on some hosts (always for `bf16`).
            DType::F16 => TensorData::F16(
                (0..n)
                    .map(|i| f16::from_f32(self.get_f64(i) as f32))
                    .collect(),
            ),
            DType::BF16 => TensorData::BF16(
                (0..n)
                    .map(|i| bf16::from_f32(self.get_f64(i) as f32))
                    .collect(),
            ),
            DType::I64 => TensorData::I64((0..n).map(int).collect()),
            DType::I32 => TensorData::I32((0..n).map(|i| int(i) as i32).collect()),
            DType::I8 => TensorData::I8((0..n).map(|i| int(i) as i8).collect()),
            DType::U8 => TensorData::U8((0..n).map(|i| int(i) as u8).collect()),
            DType::I4 => TensorData::I4((0..n).map(|i| int(i).clamp(-8, 7) as i8).collect()),
            DType::U4 => TensorData::U4((0..n).map(|i| int(i).clamp(0, 15) as u8).collect()),
            DType::Bool => TensorData::Bool((0..n).map(|i| self.get_f64(i) != 0.0).collect()),
        };
        Tensor {
            shape: self.shape.clone(),
            data,
        }
    }

    /// Builds a tensor of `dtype` from `f64` values (converted as by [`Tensor::cast`]).
    pub fn from_f64(
        dtype: DType,
        shape: Vec<usize>,
        values: &[f64],
    ) -> Result<Tensor, ShapeMismatch> {
        let data = match dtype {
            DType::F32 => TensorData::F32(values.iter().map(|&v| v as f32).collect()),
            DType::F16 => TensorData::F16(values.iter().map(|&v| f16::from_f64(v)).collect()),
            DType::BF16 => TensorData::BF16(values.iter().map(|&v| bf16::from_f64(v)).collect()),
            DType::I64 => TensorData::I64(values.iter().map(|&v| v as i64).collect()),
            DType::I32 => TensorData::I32(values.iter().map(|&v| v as i32).collect()),
            DType::I8 => TensorData::I8(values.iter().map(|&v| v as i8).collect()),
            DType::U8 => TensorData::U8(values.iter().map(|&v| v as u8).collect()),
            DType::I4 => TensorData::I4(
                values
                    .iter()
                    .map(|&v| (v as i64).clamp(-8, 7) as i8)
                    .collect(),
            ),
            DType::U4 => TensorData::U4(
                values
                    .iter()
                    .map(|&v| (v as i64).clamp(0, 15) as u8)
                    .collect(),
            ),
            DType::Bool => TensorData::Bool(values.iter().map(|&v| v != 0.0).collect()),
        };
        Tensor::new(shape, data)
    }

    /// Little-endian bytes; 4-bit types packed two per byte, low nibble first.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.le_bytes().into_owned()
    }

    /// [`Tensor::to_le_bytes`], borrowed where the values already are those
    /// bytes in memory (every byte-sized or wider number type on a
    /// little-endian host), so that writing a large tensor does not copy it.
    pub fn le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        match &self.data {
            TensorData::F32(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::F16(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::BF16(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::I64(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::I32(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::I8(v) => le_view(v, |x| x.to_le_bytes()),
            TensorData::U8(v) => Cow::Borrowed(v),
            TensorData::I4(v) => Cow::Owned(pack_nibbles(v.iter().map(|&x| x as u8))),
            TensorData::U4(v) => Cow::Owned(pack_nibbles(v.iter().copied())),
            TensorData::Bool(v) => Cow::Owned(v.iter().map(|&x| x as u8).collect()),
        }
    }

    /// Inverse of [`Tensor::to_le_bytes`].
    pub fn from_le_bytes(
        dtype: DType,
        shape: Vec<usize>,
        bytes: &[u8],
    ) -> Result<Tensor, ShapeMismatch> {
        let n: usize = shape.iter().product();
        if bytes.len() != dtype.bytes_for(n) {
            return Err(ShapeMismatch {
                shape,
                expected: dtype.bytes_for(n),
                actual: bytes.len(),
            });
        }
        let data = match dtype {
            DType::F32 => TensorData::F32(from_le(bytes, f32::from_le_bytes)),
            DType::F16 => TensorData::F16(from_le(bytes, f16::from_le_bytes)),
            DType::BF16 => TensorData::BF16(from_le(bytes, bf16::from_le_bytes)),
            DType::I64 => TensorData::I64(from_le(bytes, i64::from_le_bytes)),
            DType::I32 => TensorData::I32(from_le(bytes, i32::from_le_bytes)),
            DType::I8 => TensorData::I8(from_le(bytes, i8::from_le_bytes)),
            DType::U8 => TensorData::U8(bytes.to_vec()),
            DType::I4 => TensorData::I4(
                unpack_nibbles(bytes, n)
                    .map(|x| ((x << 4) as i8) >> 4)
                    .collect(),
            ),
            DType::U4 => TensorData::U4(unpack_nibbles(bytes, n).collect()),
            DType::Bool => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
        };
        Tensor::new(shape, data)
    }
}

/// A plain number type: every bit pattern of its size is a value, and its
/// little-endian bytes are its memory on a little-endian host.
///
/// # Safety
/// Implement only for types with no padding and no invalid bit patterns.
unsafe trait Plain: Copy {}
// SAFETY: integers and IEEE floats (`half`'s are `repr(transparent)` u16s).
unsafe impl Plain for f32 {}
unsafe impl Plain for f16 {}
unsafe impl Plain for bf16 {}
unsafe impl Plain for i64 {}
unsafe impl Plain for i32 {}
unsafe impl Plain for i8 {}

/// The little-endian bytes of `v`: its memory on a little-endian host,
/// else each value's `le` bytes.
fn le_view<T: Plain, const N: usize>(
    v: &[T],
    le: impl Fn(T) -> [u8; N],
) -> std::borrow::Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: `T: Plain` has no padding, so its `size_of_val(v)` bytes
        // are initialized; the borrow keeps `v` alive.
        let bytes = unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
        };
        std::borrow::Cow::Borrowed(bytes)
    } else {
        std::borrow::Cow::Owned(v.iter().flat_map(|&x| le(x)).collect())
    }
}

/// The values whose little-endian bytes `bytes` holds (its length a
/// multiple of `N`): one copy on a little-endian host, else each value
/// decoded by `from`.
fn from_le<T: Plain, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    debug_assert_eq!(std::mem::size_of::<T>(), N);
    let n = bytes.len() / N;
    if cfg!(target_endian = "little") {
        let mut v = Vec::<T>::with_capacity(n);
        // SAFETY: the vector has room for `n` values, that is `n * N`
        // bytes; any bytes make a `T: Plain`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * N);
            v.set_len(n);
        }
        v
    } else {
        bytes
            .chunks_exact(N)
            .map(|c| from(c.try_into().expect("chunks_exact yields N bytes")))
            .collect()
    }
}

fn pack_nibbles(v: impl Iterator<Item = u8>) -> Vec<u8> {
    let v: Vec<u8> = v.collect();
    v.chunks(2)
        .map(|c| (c[0] & 0xf) | (c.get(1).copied().unwrap_or(0) & 0xf) << 4)
        .collect()
}

fn unpack_nibbles(bytes: &[u8], n: usize) -> impl Iterator<Item = u8> + '_ {
    (0..n).map(move |i| (bytes[i / 2] >> (4 * (i % 2))) & 0xf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_every_dtype() {
        let vals = [0.0, 1.0, -2.0, 3.0, 7.0];
        for d in DType::ALL {
            let vals: Vec<f64> = if d.is_signed_int() || d.is_float() {
                vals.to_vec()
            } else {
                vals.iter().map(|v: &f64| v.abs()).collect()
            };
            let t = Tensor::from_f64(d, vec![5], &vals).unwrap();
            let b = t.to_le_bytes();
            assert_eq!(b.len(), d.bytes_for(5));
            assert_eq!(Tensor::from_le_bytes(d, vec![5], &b).unwrap(), t, "{d}");
        }
    }

    #[test]
    fn cast_follows_onnx() {
        let t = Tensor::from_f32(vec![4], vec![-1.7, 2.9, 0.0, f32::NAN]);
        assert_eq!(t.cast(DType::I64).as_i64().unwrap(), &[-1, 2, 0, 0]);
        assert_eq!(
            t.cast(DType::Bool).as_bool().unwrap(),
            &[true, true, false, true]
        );
        assert_eq!(t.cast(DType::I4).to_i64_vec(), vec![-1, 2, 0, 0]);
    }

    #[test]
    fn sixteen_bit_floats_round_from_f32_to_nearest_even() {
        // Above the halfway point only by the f32's lowest mantissa bits.
        let x = f32::from_bits(0x3f80_8001);
        let t = Tensor::from_f32(vec![2], vec![x, f32::from_bits(0x3f80_8000)]);
        let TensorData::BF16(b) = t.cast(DType::BF16).into_data() else {
            unreachable!()
        };
        assert_eq!(
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0x3f81, 0x3f80]
        );
        let h = Tensor::from_f32(
            vec![2],
            vec![1.0 + 2f32.powi(-11) + 2f32.powi(-23), 65520.0],
        );
        let TensorData::F16(h) = h.cast(DType::F16).into_data() else {
            unreachable!()
        };
        assert_eq!(
            h.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            [0x3c01, 0x7c00]
        );
    }

    #[test]
    fn concat_and_gather() {
        let a = TensorData::I64(vec![1, 2]);
        let b = TensorData::I64(vec![3]);
        assert_eq!(
            TensorData::concat(&[&a, &b]).unwrap(),
            TensorData::I64(vec![1, 2, 3])
        );
        assert!(TensorData::concat(&[&a, &TensorData::F32(vec![1.0])]).is_none());
        assert_eq!(
            a.gather([1, 1, 0].into_iter()),
            TensorData::I64(vec![2, 2, 1])
        );
    }
}
