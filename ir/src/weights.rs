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
        /// The mapping is of a file (not anonymous memory), so its pages
        /// may be dropped and read again.
        of_file: bool,
        /// The file is not the store's own weights file (`file`) but
        /// another (an ONNX model's external data): saving the module must
        /// write the weight, as for one held in memory.
        foreign: bool,
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

/// Where a safetensors blob puts the weights
/// ([`WeightStore::safetensors_layout`]).
#[derive(Clone, Debug)]
pub struct SafetensorsLayout {
    /// The length prefix and the JSON header, padded.
    pub head: Vec<u8>,
    /// The weights in order, each followed by its padding.
    pub pieces: Vec<LayoutPiece>,
    /// The blob's length in bytes.
    pub len: usize,
}

/// One weight of a [`SafetensorsLayout`].
#[derive(Clone, Debug)]
pub struct LayoutPiece {
    pub name: String,
    /// Its bytes.
    pub len: usize,
    /// The zero bytes after it.
    pub pad: usize,
}

/// [`WeightStore::write_safetensors_to`] writes a mapped weight, and lets
/// its pages go, this many bytes at a time.
const WRITE_PIECE_BYTES: usize = 16 << 20;

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
    /// [`WeightStore::insert`]) or mapped from another file
    /// ([`WeightStore::insert_mapped`]) rather than from the weights file:
    /// the file alone no longer holds the module's weights, so whoever
    /// writes the module must [`WeightStore::save`] a new one.
    pub fn has_held(&self) -> bool {
        self.decls.values().any(|w| {
            matches!(
                w.data,
                Some(Data::Owned(_)) | Some(Data::Mapped { foreign: true, .. })
            )
        })
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
            Data::Mapped {
                map, start, end, ..
            } => Some(&map[*start..*end]),
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
            Some(Data::Mapped {
                map,
                start,
                end,
                of_file,
                ..
            }) => {
                let t = Tensor::from_le_bytes(w.ty.dtype, shape, &map[*start..*end])
                    .map_err(|e| err(e.to_string()))?;
                // The tensor is a copy: a pass reading every weight of a
                // mapped model must not keep the file's pages resident too.
                if *of_file {
                    release_pages(map, *start..*end);
                }
                Ok(Some(Arc::new(t)))
            }
        }
    }

    /// Calls `f` with the weight's shape and its values as `f32`, half
    /// precision widened exactly, and returns what `f` returns; `Ok(None)`
    /// when the weight is declared but its data is not loaded. An `f32`
    /// weight mapped from a file (aligned, on a little-endian host) is read
    /// in place, not copied, and its pages are let go after: quantizing a
    /// mapped model touches no memory for its float weights.
    pub fn with_f32<R>(
        &self,
        name: &str,
        f: impl FnOnce(&[usize], &[f32]) -> R,
    ) -> Result<Option<R>, WeightError> {
        if let Some(Weight {
            ty,
            data:
                Some(Data::Mapped {
                    map,
                    start,
                    end,
                    of_file,
                    ..
                }),
        }) = self.decls.get(name)
        {
            let bytes = &map[*start..*end];
            // SAFETY: f32 has no invalid bit patterns; `align_to` gives the
            // aligned middle, used only when it is the whole range.
            let (head, values, tail) = unsafe { bytes.align_to::<f32>() };
            if let (DType::F32, Some(shape), true, true, true) = (
                ty.dtype,
                ty.shape.as_fixed(),
                cfg!(target_endian = "little"),
                head.is_empty(),
                tail.is_empty(),
            ) {
                if values.len() == shape.iter().product::<usize>() {
                    let r = f(&shape, values);
                    if *of_file {
                        release_pages(map, *start..*end);
                    }
                    return Ok(Some(r));
                }
            }
        }
        let Some(t) = self.tensor(name)? else {
            return Ok(None);
        };
        let t = match t.dtype() {
            DType::F32 => t,
            d if d.is_float() => Arc::new(t.cast(DType::F32)),
            d => {
                return Err(WeightError::Weight {
                    name: name.to_string(),
                    reason: format!("is {d}, not a float type"),
                })
            }
        };
        let values = t.as_f32().expect("an f32 tensor");
        Ok(Some(f(t.shape(), values)))
    }

    /// Runs `f` on every job on all cores, in any order, and returns its
    /// results in the jobs' order. A job's result may carry a weight to add
    /// (or replace): it is inserted as soon as it comes, and each job is
    /// dropped once done, so a job that holds the weight it replaces
    /// ([`WeightStore::tensor`]) lets it go then: only the weights in
    /// flight are held twice, not all of them. The first error stops the
    /// remaining jobs and is returned.
    pub fn replace_in_parallel<J: Send, R: Send, E: Send>(
        &mut self,
        jobs: Vec<J>,
        f: impl Fn(J) -> Result<(R, Option<(String, Tensor)>), E> + Sync,
    ) -> Result<Vec<R>, E> {
        let count = jobs.len();
        let jobs = std::sync::Mutex::new(jobs.into_iter().enumerate());
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(count)
            .max(1);
        let (send, done) = std::sync::mpsc::sync_channel(threads);
        let mut results: Vec<Option<R>> = (0..count).map(|_| None).collect();
        std::thread::scope(|s| {
            for _ in 0..threads {
                let (jobs, send, f) = (&jobs, send.clone(), &f);
                s.spawn(move || loop {
                    // The lock is held only to take a job, never while
                    // `f` runs (a panic in `f` is re-raised by the scope).
                    let Some((i, job)) = jobs.lock().ok().and_then(|mut j| j.next()) else {
                        break;
                    };
                    if send.send((i, f(job))).is_err() {
                        break;
                    }
                });
            }
            drop(send);
            for (i, result) in done {
                let (r, weight) = result?;
                if let Some((name, tensor)) = weight {
                    self.insert(name, tensor);
                }
                results[i] = Some(r);
            }
            Ok(results
                .into_iter()
                .map(|r| r.expect("every job ran"))
                .collect())
        })
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
                of_file: file.of_file,
                foreign: false,
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
                    of_file: file.of_file,
                    foreign: false,
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
            Data::Mapped {
                map, start, end, ..
            } => Some((map, *start..*end)),
            Data::Owned(_) => None,
        }
    }

    fn write_safetensors(&self, align: usize, pad: bool) -> Result<Vec<u8>, WeightError> {
        let layout = self.safetensors_layout(align, pad)?;
        let mut out = Vec::with_capacity(layout.len);
        self.write_safetensors_to(&layout, &mut out, false)
            .expect("writing to memory");
        Ok(out)
    }

    /// Where [`WeightStore::to_safetensors`] (`pad` false) or
    /// [`WeightStore::to_safetensors_region`] (`pad` true) puts each weight,
    /// computed from the declared types without touching the data, so that
    /// [`WeightStore::write_safetensors_to`] can stream the blob.
    pub fn safetensors_layout(
        &self,
        align: usize,
        pad: bool,
    ) -> Result<SafetensorsLayout, WeightError> {
        assert!(align.is_power_of_two() && align >= 8, "alignment {align}");
        let mut header = serde_json::Map::new();
        let mut pieces = Vec::with_capacity(self.decls.len());
        let mut offset = 0usize;
        for (name, w) in &self.decls {
            let err = |reason: String| WeightError::Weight {
                name: name.clone(),
                reason,
            };
            if w.data.is_none() {
                return Err(err("has no data to save".to_string()));
            }
            let shape =
                w.ty.shape
                    .as_fixed()
                    .ok_or_else(|| err(format!("shape {} is not static", w.ty.shape)))?;
            let len = w.ty.dtype.bytes_for(shape.iter().product());
            header.insert(
                name.clone(),
                serde_json::json!({
                    "dtype": dtype_tag(w.ty.dtype),
                    "shape": shape,
                    "data_offsets": [offset, offset + len],
                }),
            );
            offset += len;
            let gap = offset.next_multiple_of(align) - offset;
            let gap = if pad { gap } else { 0 };
            if gap > 0 {
                header.insert(
                    format!("{PAD_PREFIX}{name}"),
                    serde_json::json!({
                        "dtype": "U8",
                        "shape": [gap],
                        "data_offsets": [offset, offset + gap],
                    }),
                );
                offset += gap;
            }
            pieces.push(LayoutPiece {
                name: name.clone(),
                len,
                pad: gap,
            });
        }
        let mut json = serde_json::to_vec(&serde_json::Value::Object(header))
            .expect("JSON of strings and numbers");
        while !(8 + json.len()).is_multiple_of(align) {
            json.push(b' ');
        }
        let mut head = Vec::with_capacity(8 + json.len());
        head.extend_from_slice(&(json.len() as u64).to_le_bytes());
        head.extend_from_slice(&json);
        Ok(SafetensorsLayout {
            len: head.len() + offset,
            head,
            pieces,
        })
    }

    /// Writes the blob `layout` describes (from
    /// [`WeightStore::safetensors_layout`] of this store) to `w`, one weight
    /// at a time: a mapped weight straight from its mapping, a held one
    /// through its little-endian bytes. With `release`, a mapped weight's
    /// pages are dropped from the mapping as they are written, 16 MiB at a
    /// time (`MADV_DONTNEED`: the file stays in the page cache, the process
    /// stops holding it), so streaming a mapped model does not grow the
    /// resident set by more than that.
    pub fn write_safetensors_to(
        &self,
        layout: &SafetensorsLayout,
        w: &mut dyn std::io::Write,
        release: bool,
    ) -> std::io::Result<()> {
        let gone = |name: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("weight @{name} is not in the store the layout was made from"),
            )
        };
        w.write_all(&layout.head)?;
        let zeros = [0u8; 64];
        for piece in &layout.pieces {
            let decl = self
                .decls
                .get(&piece.name)
                .ok_or_else(|| gone(&piece.name))?;
            let written = match decl.data.as_ref().ok_or_else(|| gone(&piece.name))? {
                Data::Mapped {
                    map,
                    start,
                    end,
                    of_file,
                    ..
                } => {
                    // A piece at a time, so that a released weight never
                    // has more than one piece of its pages resident.
                    let mut at = *start;
                    while at < *end {
                        let to = (at + WRITE_PIECE_BYTES).min(*end);
                        w.write_all(&map[at..to])?;
                        if release && *of_file {
                            release_pages(map, at..to);
                        }
                        at = to;
                    }
                    end - start
                }
                Data::Owned(t) => {
                    let bytes = t.le_bytes();
                    w.write_all(&bytes)?;
                    bytes.len()
                }
            };
            if written != piece.len {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "weight @{} has {written} bytes, its type says {}",
                        piece.name, piece.len
                    ),
                ));
            }
            let mut gap = piece.pad;
            while gap > 0 {
                let n = gap.min(zeros.len());
                w.write_all(&zeros[..n])?;
                gap -= n;
            }
        }
        Ok(())
    }

    /// Adds (or replaces) a weight whose bytes (little-endian, as
    /// safetensors stores them) lie at `range` of `map`, a mapping of a
    /// file (an ONNX model's external data): nothing is copied.
    pub fn insert_mapped(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        map: Arc<Mmap>,
        range: std::ops::Range<usize>,
    ) {
        self.decls.insert(
            name.into(),
            Weight {
                ty,
                data: Some(Data::Mapped {
                    map,
                    start: range.start,
                    end: range.end,
                    of_file: true,
                    foreign: true,
                }),
            },
        );
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

/// Drops the pages of `range` of `map`, a read-only mapping of a file, from
/// the process (`MADV_DONTNEED`): they stay in the page cache and are read
/// again if touched, so this only bounds the resident set. (Not for
/// anonymous memory, whose dropped pages read back as zeros.)
pub fn release_pages(map: &Mmap, range: std::ops::Range<usize>) {
    // SAFETY: for a read-only file mapping, dropped pages are read again
    // from the file when next touched; the callers hold no reference into
    // them across this call.
    let _ = unsafe {
        map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
    };
}

struct FileEntry {
    ty: TensorType,
    start: usize,
    end: usize,
}

struct MappedFile {
    map: Arc<Mmap>,
    entries: BTreeMap<String, FileEntry>,
    /// `map` is a file's (not anonymous memory that a caller filled).
    of_file: bool,
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
    let mut file = parse_blob(Arc::new(map), 0..len, path)?;
    file.of_file = true;
    Ok(file)
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
    Ok(MappedFile {
        map,
        entries,
        of_file: false,
    })
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
    fn weights_mapped_from_another_file_stream_and_count_as_held() {
        // A raw file of two f32s after 4 bytes, as an ONNX external-data
        // file holds a weight.
        let path = tmpdir("foreign").join("w.bin");
        let mut bytes = vec![0u8; 4];
        bytes.extend([1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()));
        fs::write(&path, &bytes).unwrap();
        let map = Arc::new(unsafe { Mmap::map(&fs::File::open(&path).unwrap()) }.unwrap());
        let mut s = WeightStore::new();
        s.insert_mapped("m", TensorType::fixed(DType::F32, &[2]), map, 4..12);
        assert!(
            s.has_held(),
            "not in the store's own file: saving must write it"
        );
        assert_eq!(
            s.tensor("m").unwrap().unwrap().as_f32().unwrap(),
            &[1.5, -2.0]
        );
        s.insert("o", Tensor::from_f32(vec![1], vec![3.0]));
        for pad in [false, true] {
            let layout = s.safetensors_layout(64, pad).unwrap();
            let mut streamed = Vec::new();
            s.write_safetensors_to(&layout, &mut streamed, true)
                .unwrap();
            let whole = if pad {
                s.to_safetensors_region(64).unwrap()
            } else {
                s.to_safetensors(64).unwrap()
            };
            assert_eq!(streamed, whole);
            assert_eq!(layout.len, whole.len());
        }
        // Released pages read back from the file.
        assert_eq!(
            s.tensor("m").unwrap().unwrap().as_f32().unwrap(),
            &[1.5, -2.0]
        );
    }

    #[test]
    fn f32_values_are_read_in_place_when_mapped_and_aligned() {
        // Two f32s at byte 4 (aligned) and at byte 14 (not).
        let path = tmpdir("with-f32").join("w.bin");
        let mut bytes = vec![0u8; 4];
        bytes.extend([1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()));
        bytes.extend([0u8; 2]);
        bytes.extend([3.0f32, 4.0].iter().flat_map(|x| x.to_le_bytes()));
        fs::write(&path, &bytes).unwrap();
        let map = Arc::new(unsafe { Mmap::map(&fs::File::open(&path).unwrap()) }.unwrap());
        let ty = TensorType::fixed(DType::F32, &[2]);
        let mut s = WeightStore::new();
        s.insert_mapped("aligned", ty.clone(), map.clone(), 4..12);
        s.insert_mapped("unaligned", ty, map.clone(), 14..22);
        s.insert(
            "half",
            Tensor::from_f64(DType::F16, vec![2], &[0.5, -1.0]).unwrap(),
        );
        s.declare("none", TensorType::fixed(DType::F32, &[2]));
        let in_map = |v: &[f32]| {
            let at = v.as_ptr() as usize;
            (map.as_ptr() as usize..map.as_ptr() as usize + map.len()).contains(&at)
        };
        let read = |name| {
            s.with_f32(name, |shape, v| (shape.to_vec(), v.to_vec(), in_map(v)))
                .unwrap()
        };
        assert_eq!(read("aligned"), Some((vec![2], vec![1.5, -2.0], true)));
        assert_eq!(read("unaligned"), Some((vec![2], vec![3.0, 4.0], false)));
        assert_eq!(read("half"), Some((vec![2], vec![0.5, -1.0], false)));
        assert_eq!(read("none"), None);
        s.insert("ints", Tensor::from_i64(vec![1], vec![3]));
        let e = s.with_f32("ints", |_, _| ()).unwrap_err().to_string();
        assert!(e.contains("not a float type"), "{e}");
    }

    #[test]
    fn parallel_replacement_keeps_job_order_and_stops_at_an_error() {
        let mut s = WeightStore::new();
        for i in 0..9 {
            s.insert(format!("w{i}"), Tensor::from_f32(vec![1], vec![i as f32]));
        }
        let jobs: Vec<usize> = (0..9).collect();
        let doubled = s
            .replace_in_parallel(jobs, |i| {
                let t = Tensor::from_f32(vec![1], vec![2.0 * i as f32]);
                Ok::<_, String>((i * 10, (i % 2 == 0).then(|| (format!("w{i}"), t))))
            })
            .unwrap();
        assert_eq!(doubled, (0..9).map(|i| i * 10).collect::<Vec<_>>());
        for i in 0..9 {
            let v = s
                .tensor(&format!("w{i}"))
                .unwrap()
                .unwrap()
                .as_f32()
                .unwrap()[0];
            assert_eq!(v, if i % 2 == 0 { 2.0 * i as f32 } else { i as f32 });
        }
        let e = s
            .replace_in_parallel((0..9).collect(), |i: usize| match i {
                4 => Err(format!("job {i} fails")),
                _ => Ok(((), None)),
            })
            .unwrap_err();
        assert_eq!(e, "job 4 fails");
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
