//! The out-of-line weight store.
//!
//! Weights are declared in the module (`weight @name : f32[64, 128]`) and
//! their bytes live in a file beside it, memory-mapped when loaded. The file
//! uses the safetensors layout (an 8-byte little-endian header length, a JSON
//! header of `name -> {dtype, shape, data_offsets}`, then the bytes, with no
//! holes), so common tools can read it; our sub-byte types use the dtype names
//! `I4`/`U4`, packed two per byte, low nibble first. Passes may add weights
//! held in memory (folded or quantized tensors); [`WeightStore::save`] writes
//! all of them to a new file.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::dtype::DType;
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Error reading, checking or writing a weights file.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("weight @{name}: {reason}")]
    Weight { name: String, reason: String },
}

/// The name prefix of the padding tensors of
/// [`WeightStore::to_safetensors_region`] (never a weight: `WeightStore::open`
/// skips them).
pub const PAD_PREFIX: &str = "__pad__.";

/// Where a weight's bytes are.
#[derive(Clone)]
enum Data {
    Mapped {
        map: Arc<Mmap>,
        start: usize,
        end: usize,
    },
    Owned(Arc<Tensor>),
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Data::Mapped { start, end, .. } => write!(f, "Mapped({start}..{end})"),
            Data::Owned(t) => write!(f, "Owned({:?})", t.shape()),
        }
    }
}

/// One declared weight.
#[derive(Clone, Debug)]
pub struct Weight {
    pub ty: TensorType,
    data: Option<Data>,
}

impl Weight {
    pub fn has_data(&self) -> bool {
        self.data.is_some()
    }
}

/// The module's weights by name, with the file they come from.
#[derive(Clone, Debug, Default)]
pub struct WeightStore {
    /// The file name as written in the module header (relative to the module).
    pub file: Option<String>,
    decls: BTreeMap<String, Weight>,
}

fn dtype_tag(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::I8 => "I8",
        DType::U8 => "U8",
        DType::I4 => "I4",
        DType::U4 => "U4",
        DType::Bool => "BOOL",
    }
}

fn dtype_from_tag(s: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| dtype_tag(d) == s)
}

impl WeightStore {
    pub fn new() -> WeightStore {
        WeightStore::default()
    }

    /// Declares a weight without data (the text form's `weight @name : T`).
    pub fn declare(&mut self, name: impl Into<String>, ty: TensorType) {
        self.decls.insert(name.into(), Weight { ty, data: None });
    }

    /// Adds (or replaces) a weight held in memory.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        let ty = TensorType::fixed(
            tensor.dtype(),
            &tensor.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(),
        );
        self.decls.insert(
            name.into(),
            Weight {
                ty,
                data: Some(Data::Owned(Arc::new(tensor))),
            },
        );
    }

    /// Whether some weight is held in memory (added by a pass with
    /// [`WeightStore::insert`]) rather than mapped from the weights file:
    /// the file alone no longer holds the module's weights, so whoever
    /// writes the module must [`WeightStore::save`] a new one.
    pub fn has_held(&self) -> bool {
        self.decls
            .values()
            .any(|w| matches!(w.data, Some(Data::Owned(_))))
    }

    pub fn get(&self, name: &str) -> Option<&Weight> {
        self.decls.get(name)
    }

    pub fn remove(&mut self, name: &str) -> Option<Weight> {
        self.decls.remove(name)
    }

    /// Declared weights in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Weight)> {
        self.decls.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.decls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.decls.is_empty()
    }

    /// The raw little-endian bytes of a weight, if its data is loaded and mapped.
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        match self.decls.get(name)?.data.as_ref()? {
            Data::Mapped { map, start, end } => Some(&map[*start..*end]),
            Data::Owned(_) => None,
        }
    }

    /// The weight as a tensor (decoded from the mapping, or the held tensor).
    /// `Ok(None)` when the weight is declared but its data is not loaded.
    pub fn tensor(&self, name: &str) -> Result<Option<Arc<Tensor>>, WeightError> {
        let err = |reason: String| WeightError::Weight {
            name: name.to_string(),
            reason,
        };
        let w = self
            .decls
            .get(name)
            .ok_or_else(|| err("not declared".to_string()))?;
        let shape =
            w.ty.shape
                .as_fixed()
                .ok_or_else(|| err(format!("shape {} is not static", w.ty.shape)))?;
        match &w.data {
            None => Ok(None),
            Some(Data::Owned(t)) => Ok(Some(t.clone())),
            Some(Data::Mapped { map, start, end }) => {
                Tensor::from_le_bytes(w.ty.dtype, shape, &map[*start..*end])
                    .map(|t| Some(Arc::new(t)))
                    .map_err(|e| err(e.to_string()))
            }
        }
    }

    /// Maps the weights file at `path` and attaches its data to the declared
    /// weights. Every declared weight must be present with the declared type;
    /// tensors in the file that the module does not declare are ignored.
    pub fn attach_file(&mut self, path: &Path) -> Result<(), WeightError> {
        let file = read_file(path)?;
        self.attach(file, path)
    }

    fn attach(&mut self, file: MappedFile, path: &Path) -> Result<(), WeightError> {
        for (name, w) in self.decls.iter_mut() {
            let Some(entry) = file.entries.get(name) else {
                return Err(WeightError::Format {
                    path: path.to_path_buf(),
                    reason: format!("weight @{name} is declared but not in the file"),
                });
            };
            if entry.ty != w.ty {
                return Err(WeightError::Format {
                    path: path.to_path_buf(),
                    reason: format!(
                        "weight @{name} is {} in the file but declared {}",
                        entry.ty, w.ty
                    ),
                });
            }
            w.data = Some(Data::Mapped {
                map: file.map.clone(),
                start: entry.start,
                end: entry.end,
            });
        }
        Ok(())
    }

    /// Loads every tensor of a weights file as a declared, mapped weight.
    pub fn open(path: &Path) -> Result<WeightStore, WeightError> {
        let file = read_file(path)?;
        let decls = file
            .entries
            .into_iter()
            .filter(|(name, _)| !name.starts_with(PAD_PREFIX))
            .map(|(name, e)| {
                let data = Some(Data::Mapped {
                    map: file.map.clone(),
                    start: e.start,
                    end: e.end,
                });
                (name, Weight { ty: e.ty, data })
            })
            .collect();
        Ok(WeightStore {
            file: path.file_name().map(|f| f.to_string_lossy().into_owned()),
            decls,
        })
    }

    /// Writes every weight with data to `path` (atomically: a temporary file
    /// renamed into place). Weights are written in name order, so the same
    /// store always gives the same bytes.
    pub fn save(&self, path: &Path) -> Result<(), WeightError> {
        let io = |source| WeightError::Io {
            path: path.to_path_buf(),
            source,
        };
        let out = self.to_safetensors(8)?;
        let tmp = path.with_extension("tmp-write");
        fs::write(&tmp, &out).map_err(io)?;
        fs::rename(&tmp, path).map_err(io)
    }

    /// Every weight with data in the safetensors layout, in name order (the
    /// same store always gives the same bytes). The JSON header is padded
    /// with spaces so that the data starts at a multiple of `align` bytes
    /// (a power of two, at least 8) from the start of the blob.
    pub fn to_safetensors(&self, align: usize) -> Result<Vec<u8>, WeightError> {
        self.write_safetensors(align, false)
    }

    /// [`WeightStore::to_safetensors`] with every tensor also starting at a
    /// multiple of `align` bytes from the data's start: each tensor is
    /// followed by a `u8` padding tensor ([`PAD_PREFIX`] and its name) up
    /// to the next multiple, so the blob stays valid safetensors (no holes)
    /// and its data section is byte for byte the weights region the memory
    /// planner lays out (name order, `align`-aligned offsets), which an
    /// executor can then use in place.
    pub fn to_safetensors_region(&self, align: usize) -> Result<Vec<u8>, WeightError> {
        self.write_safetensors(align, true)
    }

    /// The mapping a weight's bytes lie in and their range in it, when
    /// the weight is mapped (not held).
    pub fn mapped(&self, name: &str) -> Option<(&Arc<Mmap>, std::ops::Range<usize>)> {
        match self.decls.get(name)?.data.as_ref()? {
            Data::Mapped { map, start, end } => Some((map, *start..*end)),
            Data::Owned(_) => None,
        }
    }

    fn write_safetensors(&self, align: usize, pad: bool) -> Result<Vec<u8>, WeightError> {
        assert!(align.is_power_of_two() && align >= 8, "alignment {align}");
        let mut header = serde_json::Map::new();
        let mut blobs: Vec<Vec<u8>> = Vec::new();
        let mut offset = 0usize;
        for (name, w) in &self.decls {
            let Some(t) = self.tensor(name)? else {
                return Err(WeightError::Weight {
                    name: name.clone(),
                    reason: "has no data to save".to_string(),
                });
            };
            let bytes = t.to_le_bytes();
            let shape: Vec<usize> = t.shape().to_vec();
            header.insert(
                name.clone(),
                serde_json::json!({
                    "dtype": dtype_tag(w.ty.dtype),
                    "shape": shape,
                    "data_offsets": [offset, offset + bytes.len()],
                }),
            );
            offset += bytes.len();
            blobs.push(bytes);
            let gap = offset.next_multiple_of(align) - offset;
            if pad && gap > 0 {
                header.insert(
                    format!("{PAD_PREFIX}{name}"),
                    serde_json::json!({
                        "dtype": "U8",
                        "shape": [gap],
                        "data_offsets": [offset, offset + gap],
                    }),
                );
                offset += gap;
                blobs.push(vec![0; gap]);
            }
        }
        let mut json = serde_json::to_vec(&serde_json::Value::Object(header))
            .expect("JSON of strings and numbers");
        while !(8 + json.len()).is_multiple_of(align) {
            json.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + json.len() + offset);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for b in blobs {
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    /// Attaches the weights of a safetensors blob that lies at `range` of an
    /// existing mapping (a package's weights section), as
    /// [`WeightStore::attach_file`] does for a file; `path` names the file
    /// in errors.
    pub fn attach_mapped(
        &mut self,
        map: Arc<Mmap>,
        range: std::ops::Range<usize>,
        path: &Path,
    ) -> Result<(), WeightError> {
        let file = parse_blob(map, range, path)?;
        self.attach(file, path)
    }
}

struct FileEntry {
    ty: TensorType,
    start: usize,
    end: usize,
}

struct MappedFile {
    map: Arc<Mmap>,
    entries: BTreeMap<String, FileEntry>,
}

fn read_file(path: &Path) -> Result<MappedFile, WeightError> {
    let io = |source| WeightError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = fs::File::open(path).map_err(io)?;
    // SAFETY: the mapping is read-only; a weights file changed by another
    // process while mapped is outside what we defend against (as with any
    // memory-mapped model file).
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let len = map.len();
    parse_blob(Arc::new(map), 0..len, path)
}

/// Reads the safetensors header of the blob at `range` of `map`; entry
/// offsets are absolute in the mapping.
fn parse_blob(
    map: Arc<Mmap>,
    range: std::ops::Range<usize>,
    path: &Path,
) -> Result<MappedFile, WeightError> {
    let bad = |reason: String| WeightError::Format {
        path: path.to_path_buf(),
        reason,
    };
    if range.start > range.end || range.end > map.len() {
        return Err(bad(format!(
            "weights at bytes {}..{} outside the {}-byte file",
            range.start,
            range.end,
            map.len()
        )));
    }
    let base = range.start;
    let blob = &map[range];
    if blob.len() < 8 {
        return Err(bad(format!(
            "file is {} bytes, too short for a header",
            blob.len()
        )));
    }
    let hlen = u64::from_le_bytes(blob[..8].try_into().expect("8 bytes")) as usize;
    let data_start = 8usize
        .checked_add(hlen)
        .filter(|&e| e <= blob.len())
        .ok_or_else(|| {
            bad(format!(
                "header length {hlen} runs past the end of the file"
            ))
        })?;
    let header: serde_json::Value = serde_json::from_slice(&blob[8..data_start])
        .map_err(|e| bad(format!("header is not valid JSON: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| bad("header is not a JSON object".to_string()))?;
    let data_len = blob.len() - data_start;
    let mut entries = BTreeMap::new();
    for (name, e) in obj {
        if name == "__metadata__" {
            continue;
        }
        let tbad = |reason: &str| bad(format!("tensor `{name}`: {reason}"));
        let dtype = e["dtype"]
            .as_str()
            .and_then(dtype_from_tag)
            .ok_or_else(|| tbad("missing or unknown dtype"))?;
        let shape: Vec<i64> = e["shape"]
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_i64().filter(|v| *v >= 0)).collect())
            .ok_or_else(|| tbad("missing or invalid shape"))?;
        let offs: Vec<usize> = e["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|v| v as usize)).collect())
            .filter(|v: &Vec<usize>| v.len() == 2)
            .ok_or_else(|| tbad("missing or invalid data_offsets"))?;
        let (start, end) = (offs[0], offs[1]);
        if start > end || end > data_len {
            return Err(tbad(&format!(
                "data_offsets [{start}, {end}] outside the {data_len} data bytes"
            )));
        }
        let n: usize = shape.iter().map(|&d| d as usize).product();
        if dtype.bytes_for(n) != end - start {
            return Err(tbad(&format!(
                "shape {shape:?} of {dtype} needs {} bytes, data_offsets give {}",
                dtype.bytes_for(n),
                end - start
            )));
        }
        entries.insert(
            name.clone(),
            FileEntry {
                ty: TensorType::fixed(dtype, &shape),
                start: base + data_start + start,
                end: base + data_start + end,
            },
        );
    }
    Ok(MappedFile { map, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("slmcc-weights-{tag}-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn save_then_open_round_trips() {
        let mut s = WeightStore::new();
        s.insert("w", Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]));
        s.insert(
            "q",
            Tensor::from_f64(DType::I4, vec![3], &[-8.0, 7.0, 1.0]).unwrap(),
        );
        let path = tmpdir("rt").join("m.safetensors");
        s.save(&path).unwrap();
        let back = WeightStore::open(&path).unwrap();
        assert!(s.has_held() && !back.has_held());
        assert_eq!(
            back.tensor("w").unwrap().unwrap().as_f32().unwrap(),
            &[1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(
            back.tensor("q").unwrap().unwrap().to_i64_vec(),
            vec![-8, 7, 1]
        );
        assert_eq!(back.bytes("w").unwrap().len(), 16);
    }

    #[test]
    fn region_layout_aligns_every_tensor_and_stays_safetensors() {
        let mut s = WeightStore::new();
        s.insert("a", Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]));
        s.insert("b", Tensor::from_f32(vec![2], vec![4.0, 5.0]));
        let blob = s.to_safetensors_region(64).unwrap();
        let path = tmpdir("region").join("m.safetensors");
        fs::write(&path, &blob).unwrap();
        let back = WeightStore::open(&path).unwrap();
        assert_eq!(back.len(), 2, "padding tensors are not weights");
        let a = back.mapped("a").unwrap().1.start;
        let b = back.mapped("b").unwrap().1.start;
        assert_eq!(a % 64, 0);
        assert_eq!(b - a, 64);
        assert_eq!(
            blob.len() - a,
            128,
            "the data section is the aligned region"
        );
        assert_eq!(
            back.tensor("b").unwrap().unwrap().as_f32().unwrap(),
            &[4.0, 5.0]
        );
    }

    #[test]
    fn declared_type_must_match_file() {
        let mut s = WeightStore::new();
        s.insert("w", Tensor::from_f32(vec![4], vec![0.0; 4]));
        let path = tmpdir("mismatch").join("m.safetensors");
        s.save(&path).unwrap();
        let mut d = WeightStore::new();
        d.declare("w", TensorType::fixed(DType::F32, &[2, 2]));
        let e = d.attach_file(&path).unwrap_err().to_string();
        assert!(e.contains("declared f32[2, 2]"), "{e}");
    }

    #[test]
    fn aligned_blobs_attach_from_inside_a_mapping() {
        let mut s = WeightStore::new();
        s.insert("a", Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]));
        s.insert("b", Tensor::from_i64(vec![2], vec![7, -1]));
        let blob = s.to_safetensors(64).unwrap();
        let hlen = u64::from_le_bytes(blob[..8].try_into().unwrap()) as usize;
        assert_eq!((8 + hlen) % 64, 0);
        assert_eq!(blob, s.to_safetensors(64).unwrap());
        let mut file = vec![0xAA; 128];
        file.extend_from_slice(&blob);
        file.extend_from_slice(&[0xBB; 7]);
        let path = tmpdir("mapped").join("pkg.bin");
        fs::write(&path, &file).unwrap();
        // SAFETY: a file this test owns.
        let map = Arc::new(unsafe { Mmap::map(&fs::File::open(&path).unwrap()) }.unwrap());
        let mut d = WeightStore::new();
        d.declare("b", TensorType::fixed(DType::I64, &[2]));
        d.attach_mapped(map.clone(), 128..128 + blob.len(), &path)
            .unwrap();
        assert_eq!(d.tensor("b").unwrap().unwrap().to_i64_vec(), vec![7, -1]);
        let e = d.attach_mapped(map, 128..132, &path).unwrap_err();
        assert!(e.to_string().contains("too short"), "{e}");
    }

    #[test]
    fn truncated_file_is_an_error() {
        let path = tmpdir("trunc").join("m.safetensors");
        fs::write(&path, [200, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
        let e = WeightStore::open(&path).unwrap_err().to_string();
        assert!(e.contains("runs past the end"), "{e}");
    }
}
