//! Reading and writing NumPy `.npy` files (format versions 1–3).
//!
//! Supported element types: `<f4`, `<f2`, `<i8`, `<i4`, `|i1`, `|u1`,
//! `|b1` (C order). Anything else is an error naming the file and the type.

use std::path::Path;

use slmcc_ir::{DType, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
        DType::BF16 | DType::I4 | DType::U4 => return None,
    })
}

fn dtype_of(descr: &str) -> Option<DType> {
    let d = match descr {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "<i8" => DType::I64,
        "<i4" => DType::I32,
        "|i1" | "<i1" => DType::I8,
        "|u1" | "<u1" => DType::U8,
        "|b1" => DType::Bool,
        _ => return None,
    };
    Some(d)
}

/// Serialises a tensor as `.npy` (version 1.0).
pub fn to_bytes(t: &Tensor) -> Result<Vec<u8>, String> {
    let d = descr(t.dtype()).ok_or_else(|| format!("{} tensors have no .npy form", t.dtype()))?;
    let shape = match t.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that the data starts on a 64-byte boundary; end with a newline.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + t.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&t.to_le_bytes());
    Ok(out)
}

/// Parses `.npy` bytes.
pub fn from_bytes(bytes: &[u8]) -> Result<Tensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".to_string());
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or("header runs past the end of the file")?;
    let header = std::str::from_utf8(&bytes[start..end]).map_err(|_| "header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| format!("header has no '{key}'"))?;
        let rest = header[at + key.len() + 2..].trim_start();
        Ok(rest.strip_prefix(':').unwrap_or(rest).trim_start())
    };
    let descr_text = field("descr")?;
    let descr_val = descr_text
        .strip_prefix('\'')
        .and_then(|s| s.split('\'').next())
        .ok_or("malformed 'descr'")?;
    let dtype =
        dtype_of(descr_val).ok_or_else(|| format!("unsupported element type '{descr_val}'"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran-ordered arrays are not supported".to_string());
    }
    let shape_text = field("shape")?;
    let dims = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split_once(')'))
        .map(|(dims, _)| dims)
        .ok_or("malformed 'shape'")?;
    let shape = dims
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad dim `{s}` in 'shape'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Tensor::from_le_bytes(dtype, shape, &bytes[end..])
        .map_err(|e| format!("data does not match the header: {e}"))
}

/// Reads a `.npy` file; errors name the file.
pub fn read(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes a `.npy` file.
pub fn write(path: &Path, t: &Tensor) -> Result<(), String> {
    let bytes = to_bytes(t).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for t in [
            Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            Tensor::from_i64(vec![], vec![42]),
            Tensor::from_bool(vec![3], vec![true, false, true]),
        ] {
            let b = to_bytes(&t).unwrap();
            assert_eq!((b.len() - t.to_le_bytes().len()) % 64, 0);
            assert_eq!(from_bytes(&b).unwrap(), t);
        }
    }

    #[test]
    fn reads_numpy_written_header() {
        // What numpy 1.26 writes for np.arange(3, dtype=np.int32).
        let mut b =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"
                .to_vec();
        b.resize(10 + 0x76 - 1, b' ');
        b.push(b'\n');
        for v in 0i32..3 {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let t = from_bytes(&b).unwrap();
        assert_eq!(t.shape(), &[3]);
        assert_eq!(t.to_i64_vec(), vec![0, 1, 2]);
    }

    #[test]
    fn rejects_bad_files() {
        assert!(from_bytes(b"hello").is_err());
        let t = Tensor::from_f32(vec![4], vec![0.0; 4]);
        let b = to_bytes(&t).unwrap();
        assert!(from_bytes(&b[..b.len() - 1])
            .unwrap_err()
            .contains("does not match"));
        let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n";
        let mut f64_file = b"\x93NUMPY\x01\x00".to_vec();
        f64_file.extend_from_slice(&(header.len() as u16).to_le_bytes());
        f64_file.extend_from_slice(header.as_bytes());
        f64_file.extend_from_slice(&1f64.to_le_bytes());
        let e = from_bytes(&f64_file).unwrap_err();
        assert!(e.contains("'<f8'"), "{e}");
        // Found by fuzzing: a shape that closes before it opens.
        let header = "{'descr': '<i8', 'fortran_order': False, 'shape': )63,=), }\n";
        let mut bad_shape = b"\x93NUMPY\x01\x00".to_vec();
        bad_shape.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bad_shape.extend_from_slice(header.as_bytes());
        let e = from_bytes(&bad_shape).unwrap_err();
        assert!(e.contains("malformed 'shape'"), "{e}");
    }
}
