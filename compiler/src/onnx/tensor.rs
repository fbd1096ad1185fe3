//! ONNX tensors to IR tensors: element types, and `TensorProto` decoding.
//!
//! Data comes from `raw_data` (little-endian; 4-bit types packed two per
//! byte, low nibble first), from the typed fields (`float_data`,
//! `int32_data` — which also carries `f16`/`bf16` bit patterns, 8-bit
//! integers, bools and packed 4-bit pairs — and `int64_data`), or from an
//! external file (`data_location = EXTERNAL` with `location`, `offset` and
//! `length` entries). External paths are resolved relative to the model's
//! folder and must stay inside it: absolute paths and `..` components are
//! refused, and so is a path that leaves the folder through a symbolic link.
//! The data size must agree with the dims exactly. The importer maps, rather
//! than reads, a float weight's external data ([`decode_initializer`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use onnx_protobuf::tensor_proto::{DataLocation, DataType};
use onnx_protobuf::TensorProto;
use protobuf::Enum;
use slmcc_ir::{DType, Tensor, TensorType};

/// The IR dtype of an ONNX `TensorProto.DataType` code.
pub fn dtype_from_onnx(code: i32) -> Result<DType, String> {
    let Some(dt) = DataType::from_i32(code) else {
        return Err(format!("unknown data type {code}"));
    };
    Ok(match dt {
        DataType::FLOAT => DType::F32,
        DataType::FLOAT16 => DType::F16,
        DataType::BFLOAT16 => DType::BF16,
        DataType::INT64 => DType::I64,
        DataType::INT32 => DType::I32,
        DataType::INT8 => DType::I8,
        DataType::UINT8 => DType::U8,
        DataType::INT4 => DType::I4,
        DataType::UINT4 => DType::U4,
        DataType::BOOL => DType::Bool,
        other => return Err(format!("data type {other:?} is not supported")),
    })
}

/// What a `TensorProto` declares, checked: its dtype, its shape, its
/// element count and the bytes its data must have.
struct Extent {
    dtype: DType,
    shape: Vec<usize>,
    n: usize,
    need: usize,
}

fn extent(t: &TensorProto) -> Result<Extent, String> {
    let dtype = dtype_from_onnx(t.data_type)?;
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".to_string());
    }
    let dims = &t.dims;
    let shape = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dims {dims:?} have a negative dim")))
        .collect::<Result<Vec<usize>, String>>()?;
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n.checked_mul(8).is_some())
        .ok_or_else(|| format!("dims {dims:?} are too large"))?;
    Ok(Extent {
        dtype,
        need: dtype.bytes_for(n),
        n,
        shape,
    })
}

/// Decodes a `TensorProto`; `base_dir` is the folder external data is
/// resolved against. Errors do not name the tensor (callers do).
pub fn decode_tensor(t: &TensorProto, base_dir: &Path) -> Result<Tensor, String> {
    let Extent {
        dtype,
        shape,
        n,
        need,
    } = extent(t)?;
    let dims = &t.dims;
    let size_err = |what: &str, have: usize| {
        format!("{what} has {have} bytes, but dims {dims:?} of {dtype} need {need}")
    };

    if t.data_location.enum_value() == Ok(DataLocation::EXTERNAL) {
        let bytes = read_external(t, base_dir, need)?;
        return Tensor::from_le_bytes(dtype, shape, &bytes).map_err(|e| e.to_string());
    }
    if !t.raw_data.is_empty() {
        if t.raw_data.len() != need {
            return Err(size_err("raw_data", t.raw_data.len()));
        }
        return Tensor::from_le_bytes(dtype, shape, &t.raw_data).map_err(|e| e.to_string());
    }

    let count_err = |field: &str, have: usize, want: usize| {
        format!("{field} has {have} values, but dims {dims:?} of {dtype} need {want}")
    };
    let int32 = |want: usize| -> Result<&[i32], String> {
        if t.int32_data.len() != want {
            return Err(count_err("int32_data", t.int32_data.len(), want));
        }
        Ok(&t.int32_data)
    };
    // Every typed field is turned into the little-endian bytes of the dtype.
    let bytes: Vec<u8> = match dtype {
        DType::F32 => {
            if t.float_data.len() != n {
                return Err(count_err("float_data", t.float_data.len(), n));
            }
            t.float_data.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        DType::I64 => {
            if t.int64_data.len() != n {
                return Err(count_err("int64_data", t.int64_data.len(), n));
            }
            t.int64_data.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        DType::I32 => int32(n)?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        // 16-bit floats are held as their bit patterns.
        DType::F16 | DType::BF16 => int32(n)?
            .iter()
            .flat_map(|&x| (x as u16).to_le_bytes())
            .collect(),
        DType::I8 | DType::U8 => int32(n)?.iter().map(|&x| x as u8).collect(),
        DType::Bool => int32(n)?.iter().map(|&x| (x != 0) as u8).collect(),
        // Two 4-bit values per entry, the first in the low nibble.
        DType::I4 | DType::U4 => int32(n.div_ceil(2))?.iter().map(|&x| x as u8).collect(),
    };
    Tensor::from_le_bytes(dtype, shape, &bytes).map_err(|e| e.to_string())
}

/// An external tensor's data, checked: the file (opened), its path, and
/// the byte offset of the `need` bytes in it.
struct ExternalData {
    file: File,
    path: PathBuf,
    offset: u64,
}

/// Reads the `need` bytes of an external tensor, after checking that its
/// location stays inside `base_dir`.
fn read_external(t: &TensorProto, base_dir: &Path, need: usize) -> Result<Vec<u8>, String> {
    let ExternalData {
        mut file,
        path,
        offset,
    } = locate_external(t, base_dir, need)?;
    let mut buf = vec![0u8; need];
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut buf))
        .map_err(|e| {
            format!(
                "cannot read {need} bytes at offset {offset} of external data file `{}`: {e}",
                path.display()
            )
        })?;
    Ok(buf)
}

/// Finds an external tensor's `need` bytes, after checking that its
/// location stays inside `base_dir` and the file holds them.
fn locate_external(t: &TensorProto, base_dir: &Path, need: usize) -> Result<ExternalData, String> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("external data `{}` is not a number: `{v}`", e.key))
        };
        match e.key.as_str() {
            "location" => location = Some(e.value.as_str()),
            "offset" => offset = number(&e.value)?,
            "length" => length = Some(number(&e.value)?),
            _ => {} // `checksum` and future keys
        }
    }
    let loc = location.ok_or("external data has no `location`")?;
    let rel = Path::new(loc);
    let absolute = rel.is_absolute()
        || loc.starts_with(['/', '\\'])
        || rel
            .components()
            .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)));
    if absolute {
        return Err(format!(
            "external data location `{loc}` is an absolute path (it must be relative to the model's folder)"
        ));
    }
    if rel.components().any(|c| c == Component::ParentDir) || loc.contains("..\\") {
        return Err(format!(
            "external data location `{loc}` escapes the model's folder"
        ));
    }
    if let Some(len) = length {
        if len != need as u64 {
            return Err(format!(
                "external data length {len} disagrees with dims {:?}, which need {need} bytes",
                t.dims
            ));
        }
    }
    let path = base_dir.join(rel);
    let file = File::open(&path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => format!("external data file `{}` does not exist", path.display()),
        _ => format!("cannot open external data file `{}`: {e}", path.display()),
    })?;
    // A symbolic link inside the folder may still point outside it.
    if let (Ok(real), Ok(root)) = (path.canonicalize(), base_dir.canonicalize()) {
        if !real.starts_with(&root) {
            return Err(format!(
                "external data location `{loc}` escapes the model's folder"
            ));
        }
    }
    let size = file
        .metadata()
        .map_err(|e| format!("cannot read external data file `{}`: {e}", path.display()))?
        .len();
    let end = offset.checked_add(need as u64);
    if end.is_none_or(|end| end > size) {
        return Err(format!(
            "external data file `{}` has {size} bytes, too short for {need} bytes at offset {offset}",
            path.display()
        ));
    }
    Ok(ExternalData { file, path, offset })
}

/// Mappings of external data files, one per file, shared by the weights
/// mapped from it.
#[derive(Default)]
pub(crate) struct ExternalMaps(HashMap<PathBuf, Arc<Mmap>>);

/// An initializer as the importer holds it until its first use: decoded,
/// or (a float weight in an external file) a range of that file's mapping.
pub(crate) enum Initializer {
    Decoded(Tensor),
    Mapped {
        ty: TensorType,
        map: Arc<Mmap>,
        range: std::ops::Range<usize>,
    },
}

/// Decodes an initializer, except that a float tensor stored in an
/// external file that will be a module weight (`is_weight`, given its
/// dtype and shape) is mapped, not read: its bytes are little-endian as
/// the IR stores them, so a compile copies them from the file to the
/// package once, and never holds the model's weights in memory.
pub(crate) fn decode_initializer(
    t: &TensorProto,
    base_dir: &Path,
    maps: &mut ExternalMaps,
    is_weight: impl Fn(DType, &[usize]) -> bool,
) -> Result<Initializer, String> {
    let Extent {
        dtype, shape, need, ..
    } = extent(t)?;
    let external = t.data_location.enum_value() == Ok(DataLocation::EXTERNAL);
    if !(external && dtype.is_float() && need > 0 && is_weight(dtype, &shape)) {
        return decode_tensor(t, base_dir).map(Initializer::Decoded);
    }
    let data = locate_external(t, base_dir, need)?;
    let map = match maps.0.get(&data.path) {
        Some(map) => map.clone(),
        None => {
            // SAFETY: read-only; a data file changed by another process
            // while it is mapped is outside what we defend against (as for
            // the model file itself).
            let map = unsafe { Mmap::map(&data.file) }.map_err(|e| {
                format!(
                    "cannot map external data file `{}`: {e}",
                    data.path.display()
                )
            })?;
            let map = Arc::new(map);
            maps.0.insert(data.path.clone(), map.clone());
            map
        }
    };
    let start = usize::try_from(data.offset).map_err(|_| "offset too large".to_string())?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    Ok(Initializer::Mapped {
        ty: TensorType::fixed(dtype, &dims),
        map,
        range: start..start + need,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::StringStringEntryProto;

    fn proto(dt: DataType, dims: &[i64]) -> TensorProto {
        let mut t = TensorProto::new();
        t.data_type = dt as i32;
        t.dims = dims.to_vec();
        t
    }

    fn decode(t: &TensorProto) -> Result<Tensor, String> {
        decode_tensor(t, Path::new("."))
    }

    #[test]
    fn typed_fields_of_each_dtype() {
        let mut t = proto(DataType::FLOAT, &[2]);
        t.float_data = vec![1.5, -2.0];
        assert_eq!(decode(&t).unwrap().as_f32().unwrap(), &[1.5, -2.0]);

        let mut t = proto(DataType::INT64, &[3]);
        t.int64_data = vec![1, -1, i64::MAX];
        assert_eq!(decode(&t).unwrap().as_i64().unwrap(), &[1, -1, i64::MAX]);

        let mut t = proto(DataType::INT32, &[2]);
        t.int32_data = vec![7, -7];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_i64_vec()), (DType::I32, vec![7, -7]));

        let mut t = proto(DataType::INT8, &[2]);
        t.int32_data = vec![-128, 127];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_i64_vec()), (DType::I8, vec![-128, 127]));

        let mut t = proto(DataType::UINT8, &[2]);
        t.int32_data = vec![0, 255];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_i64_vec()), (DType::U8, vec![0, 255]));

        let mut t = proto(DataType::BOOL, &[3]);
        t.int32_data = vec![1, 0, 1];
        assert_eq!(decode(&t).unwrap().as_bool().unwrap(), &[true, false, true]);

        // f16 1.0 is 0x3c00, bf16 1.0 is 0x3f80.
        let mut t = proto(DataType::FLOAT16, &[2]);
        t.int32_data = vec![0x3c00, 0xc000];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_f32_vec()), (DType::F16, vec![1.0, -2.0]));
        let mut t = proto(DataType::BFLOAT16, &[1]);
        t.int32_data = vec![0x3f80];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_f32_vec()), (DType::BF16, vec![1.0]));

        // Three int4 values in two entries, first in the low nibble.
        let mut t = proto(DataType::INT4, &[3]);
        t.int32_data = vec![0x8f, 0x07];
        let d = decode(&t).unwrap();
        assert_eq!((d.dtype(), d.to_i64_vec()), (DType::I4, vec![-1, -8, 7]));
        let mut t = proto(DataType::UINT4, &[2]);
        t.int32_data = vec![0xf1];
        assert_eq!(decode(&t).unwrap().to_i64_vec(), vec![1, 15]);
    }

    #[test]
    fn raw_data_of_each_dtype() {
        for d in DType::ALL {
            let vals: Vec<f64> = vec![0.0, 1.0, 3.0, 7.0, 2.0];
            let want = Tensor::from_f64(d, vec![5], &vals).unwrap();
            let code = match d {
                DType::F32 => DataType::FLOAT,
                DType::F16 => DataType::FLOAT16,
                DType::BF16 => DataType::BFLOAT16,
                DType::I64 => DataType::INT64,
                DType::I32 => DataType::INT32,
                DType::I8 => DataType::INT8,
                DType::U8 => DataType::UINT8,
                DType::I4 => DataType::INT4,
                DType::U4 => DataType::UINT4,
                DType::Bool => DataType::BOOL,
            };
            let mut t = proto(code, &[5]);
            t.raw_data = want.to_le_bytes();
            assert_eq!(decode(&t).unwrap(), want, "{d}");
        }
    }

    #[test]
    fn sizes_must_agree_with_dims() {
        let mut t = proto(DataType::FLOAT, &[4, 4]);
        t.raw_data = vec![0; 8];
        let e = decode(&t).unwrap_err();
        assert_eq!(e, "raw_data has 8 bytes, but dims [4, 4] of f32 need 64");
        let mut t = proto(DataType::INT64, &[3]);
        t.int64_data = vec![1];
        assert!(decode(&t).unwrap_err().contains("int64_data has 1 values"));
        let t = proto(DataType::FLOAT, &[0, 3]);
        assert_eq!(decode(&t).unwrap().shape(), &[0, 3]);
        let t = proto(DataType::FLOAT, &[2, -1]);
        assert!(decode(&t).unwrap_err().contains("negative"));
    }

    #[test]
    fn unsupported_dtypes_are_named() {
        let mut t = proto(DataType::DOUBLE, &[1]);
        t.double_data = vec![1.0];
        assert_eq!(decode(&t).unwrap_err(), "data type DOUBLE is not supported");
        assert!(dtype_from_onnx(99)
            .unwrap_err()
            .contains("unknown data type 99"));
    }

    fn external(loc: &str, offset: Option<u64>, length: Option<u64>) -> TensorProto {
        let mut t = proto(DataType::FLOAT, &[2]);
        t.data_location = DataLocation::EXTERNAL.into();
        let mut entry = |k: &str, v: String| {
            let mut e = StringStringEntryProto::new();
            e.key = k.to_string();
            e.value = v;
            t.external_data.push(e);
        };
        entry("location", loc.to_string());
        if let Some(o) = offset {
            entry("offset", o.to_string());
        }
        if let Some(l) = length {
            entry("length", l.to_string());
        }
        t
    }

    #[test]
    fn external_data() {
        let dir = std::env::temp_dir().join(format!("slmcc-onnx-ext-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = vec![0xffu8; 4];
        bytes.extend([1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(dir.join("w.bin"), &bytes).unwrap();

        let t = external("w.bin", Some(4), Some(8));
        let d = decode_tensor(&t, &dir).unwrap();
        assert_eq!(d.as_f32().unwrap(), &[1.0, 2.0]);

        let e = decode_tensor(&external("w.bin", Some(8), None), &dir).unwrap_err();
        assert!(e.contains("too short for 8 bytes at offset 8"), "{e}");
        let e = decode_tensor(&external("w.bin", None, Some(4)), &dir).unwrap_err();
        assert!(e.contains("length 4 disagrees"), "{e}");
        let e = decode_tensor(&external("nope.bin", None, None), &dir).unwrap_err();
        assert!(e.contains("nope.bin` does not exist"), "{e}");
        let e = decode_tensor(&external("../w.bin", None, None), &dir).unwrap_err();
        assert!(e.contains("escapes the model's folder"), "{e}");
        let e = decode_tensor(&external("/etc/passwd", None, None), &dir).unwrap_err();
        assert!(e.contains("is an absolute path"), "{e}");
        let e = decode_tensor(&external("w.bin", Some(u64::MAX), None), &dir).unwrap_err();
        assert!(e.contains("too short"), "{e}");
    }

    #[test]
    fn external_weights_are_mapped_not_read() {
        let dir = std::env::temp_dir().join(format!("slmcc-onnx-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = vec![0xffu8; 4];
        bytes.extend([1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(dir.join("w.bin"), &bytes).unwrap();
        let mut maps = ExternalMaps::default();
        let t = external("w.bin", Some(4), Some(8));
        // A weight: mapped at its range, the file mapped once.
        let Initializer::Mapped { ty, map, range } =
            decode_initializer(&t, &dir, &mut maps, |_, _| true).unwrap()
        else {
            panic!("a weight in an external file is mapped");
        };
        assert_eq!(ty.to_string(), "f32[2]");
        assert_eq!(&map[range], &bytes[4..]);
        let again = decode_initializer(&t, &dir, &mut maps, |_, _| true).unwrap();
        assert!(matches!(again, Initializer::Mapped { map: m, .. } if Arc::ptr_eq(&m, &map)));
        // Not a weight (a constant): decoded. The checks still apply.
        let Initializer::Decoded(d) =
            decode_initializer(&t, &dir, &mut maps, |_, _| false).unwrap()
        else {
            panic!("a constant is decoded");
        };
        assert_eq!(d.as_f32().unwrap(), &[1.0, 2.0]);
        let bad = external("w.bin", Some(8), None);
        let e = decode_initializer(&bad, &dir, &mut maps, |_, _| true)
            .err()
            .unwrap();
        assert!(e.contains("too short for 8 bytes at offset 8"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
