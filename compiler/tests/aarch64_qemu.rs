//! The aarch64 AOT objects, run: kernels compiled for
//! `aarch64-unknown-linux-gnu` are linked with the generic C harness of
//! `compiler/tests/aarch64/` (`harness.c`, the math helpers in
//! `slmcc_math.c`, and a generated table of kernel symbols) by
//! `aarch64-linux-gnu-gcc -static`, run under `qemu-aarch64` over the
//! graph's planned memory regions, and their outputs compared with the
//! host's reference interpreter (and, for the whole Qwen2 model compiled
//! by `slmcc compile --cpu aarch64`, with the onnxruntime golden logits).
//!
//! The cross compiler and qemu are required: without them the tests fail,
//! unless `SLMCC_SKIP_QEMU=1` is set, in which case they print a `SKIP`
//! line (still a failure under `SLMCC_REQUIRE_ALL`, as in CI). `SLMCC_AARCH64_CC` and `SLMCC_QEMU_AARCH64` name
//! other binaries than `aarch64-linux-gnu-gcc` and `qemu-aarch64`.

mod common;

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use common::{repo, run_pipeline, scratch_dir, slmcc, stderr};
use slmcc_backends::cpu::aot::{compile_object, AARCH64_LINUX};
use slmcc_backends::cpu::math::MathFn;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::plan::value_bytes;
use slmcc_ir::text::parse_module;
use slmcc_ir::{DType, Graph, Module, Region, Tensor, ValueDef};
use slmcc_runtime::compare::diff;
use slmcc_runtime::interp::{run_graph, Capture};
use slmcc_runtime::package::Package;

/// The goldens' tolerance: `max|a - b| / max(max|b|, 1e-6)`.
const MAX_REL: f64 = 1e-5;

/// The cross toolchain, with the harness compiled ([`build_harness`]).
struct Cross {
    cc: PathBuf,
    qemu: PathBuf,
    /// `harness.o` and `slmcc_math.o`, compiled for aarch64.
    harness: Vec<PathBuf>,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn tool(var: &str, default: &str) -> (String, Option<PathBuf>) {
    let name = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let found = on_path(&name);
    (name, found)
}

/// Flags for the C files: `-ffp-contract=off` keeps GCC from fusing
/// multiply-adds the host helpers do not fuse (see `slmcc_math.c`).
const CFLAGS: [&str; 5] = [
    "-std=c11",
    "-D_POSIX_C_SOURCE=200809L",
    "-O2",
    "-ffp-contract=off",
    "-Wall",
];

/// Compiles `harness.c` and `slmcc_math.c` for aarch64 into a folder of
/// the target dir named by a hash of the sources, compiler and flags (so a
/// rerun reuses them); each object is written under a temporary name and
/// renamed, so concurrent test processes do not race.
fn build_harness(cc: &Path) -> Result<Vec<PathBuf>, String> {
    let src = repo().join("compiler/tests/aarch64");
    let names = ["harness", "slmcc_math"];
    let mut key = DefaultHasher::new();
    (cc, CFLAGS).hash(&mut key);
    for name in names {
        let c = src.join(format!("{name}.c"));
        std::fs::read(&c)
            .map_err(|e| format!("{}: {e}", c.display()))?
            .hash(&mut key);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("aarch64-harness-{:016x}", key.finish()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut objects = Vec::new();
    for name in names {
        let obj = dir.join(format!("{name}.o"));
        if !obj.is_file() {
            let tmp = dir.join(format!("{name}.o.{}", std::process::id()));
            let o = Command::new(cc)
                .args(CFLAGS)
                .arg("-Werror")
                .arg("-c")
                .arg(src.join(format!("{name}.c")))
                .arg("-o")
                .arg(&tmp)
                .output()
                .map_err(|e| format!("{}: {e}", cc.display()))?;
            if !o.status.success() {
                return Err(format!("compiling {name}.c: {}", stderr(&o)));
            }
            std::fs::rename(&tmp, &obj).map_err(|e| format!("{}: {e}", obj.display()))?;
        }
        objects.push(obj);
    }
    Ok(objects)
}

/// The toolchain, or `None` when it is missing and `SLMCC_SKIP_QEMU=1`
/// allows skipping; otherwise a missing tool fails the test.
fn cross() -> Option<&'static Cross> {
    static CROSS: OnceLock<Result<Cross, String>> = OnceLock::new();
    let found = CROSS.get_or_init(|| {
        let (cc_name, cc) = tool("SLMCC_AARCH64_CC", "aarch64-linux-gnu-gcc");
        let (qemu_name, qemu) = tool("SLMCC_QEMU_AARCH64", "qemu-aarch64");
        let missing: Vec<&str> = [(&cc_name, &cc), (&qemu_name, &qemu)]
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        match (cc, qemu) {
            (Some(cc), Some(qemu)) => {
                let harness = build_harness(&cc)?;
                Ok(Cross { cc, qemu, harness })
            }
            _ => Err(format!(
                "`{}` not found: install the cross toolchain and qemu (Debian: apt-get install qemu-user \
                 gcc-aarch64-linux-gnu libc6-dev-arm64-cross), or set SLMCC_SKIP_QEMU=1 \
                 to skip the aarch64 object tests",
                missing.join("`, `")
            )),
        }
    });
    match found {
        Ok(c) => Some(c),
        Err(e) if std::env::var("SLMCC_SKIP_QEMU").as_deref() == Ok("1") => {
            common::skip(
                "aarch64 objects under qemu (SLMCC_SKIP_QEMU=1)",
                &format!("they were NOT run: {e}"),
            );
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// The C table that maps each kernel symbol to its address: what a loader
/// would find in the object's own symbol table.
fn kernel_table(symbols: &[&str]) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n\
         struct slmcc_kernel_entry { const char *symbol; int32_t (*fn)(uint8_t *const *); };\n",
    );
    for (i, s) in symbols.iter().enumerate() {
        assert!(
            s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "symbol `{s}`"
        );
        writeln!(c, "extern int32_t k{i}(uint8_t *const *) __asm__(\"{s}\");").unwrap();
    }
    c.push_str("const struct slmcc_kernel_entry slmcc_kernel_table[] = {\n");
    for (i, s) in symbols.iter().enumerate() {
        writeln!(c, "  {{\"{s}\", k{i}}},").unwrap();
    }
    if symbols.is_empty() {
        c.push_str("  {0, 0},\n");
    }
    writeln!(
        c,
        "}};\nconst size_t slmcc_kernel_table_len = {};",
        symbols.len()
    )
    .unwrap();
    c
}

/// Where a value of a planned graph lives: region, offset, bytes.
fn place(module: &Module, graph: &Graph, v: slmcc_ir::ValueId) -> (Region, u64, u64) {
    let plan = &module.plans[&graph.name];
    let val = graph.value(v);
    let weight = matches!(val.def, ValueDef::Weight(_));
    let t = plan
        .get(&val.name, weight)
        .unwrap_or_else(|| panic!("%{} is not planned", val.name));
    let bytes = value_bytes(&val.ty).expect("static type");
    (t.region, t.offset, bytes)
}

/// Writes the harness's plan for `graph` (planned) and its data files into
/// `dir`: the plan's regions, the weights region's image and the inputs
/// loaded, every node's kernel in schedule order over the planned places,
/// the outputs stored (`out{i}.bin`).
fn write_plan(
    dir: &Path,
    module: &Module,
    graph: &Graph,
    kernels: &[(usize, String)],
    inputs: &[(String, Tensor)],
) {
    let plan = &module.plans[&graph.name];
    let mut text = String::from("slmcc-aot-plan 1\n");
    for r in Region::ALL {
        writeln!(text, "region {} {}", r.name(), plan.regions.get(r)).unwrap();
    }
    let mut weights = vec![0u8; plan.regions.weights as usize];
    for (id, v) in graph.values() {
        if let ValueDef::Weight(name) = &v.def {
            let (_, off, bytes) = place(module, graph, id);
            let t = module.weights.tensor(name).unwrap().expect("weight data");
            let b = t.to_le_bytes();
            assert_eq!(b.len() as u64, bytes);
            weights[off as usize..][..b.len()].copy_from_slice(&b);
        }
    }
    std::fs::write(dir.join("weights.bin"), &weights).unwrap();
    writeln!(text, "load weights 0 {} weights.bin", weights.len()).unwrap();
    for (i, &id) in graph.inputs.iter().enumerate() {
        let name = &graph.value(id).name;
        let (_, t) = inputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no input `{name}`"));
        let (r, off, bytes) = place(module, graph, id);
        let b = t.to_le_bytes();
        assert_eq!(b.len() as u64, bytes, "input `{name}`");
        std::fs::write(dir.join(format!("in{i}.bin")), &b).unwrap();
        writeln!(text, "load {} {off} {bytes} in{i}.bin", r.name()).unwrap();
    }
    assert_eq!(kernels.len(), graph.nodes.len(), "one kernel per node");
    for (k, (node, symbol)) in kernels.iter().enumerate() {
        assert_eq!(*node, k, "kernels in schedule order");
        let n = &graph.nodes[*node];
        write!(text, "kernel {symbol} {}", n.inputs.len() + n.outputs.len()).unwrap();
        for &v in n.inputs.iter().chain(&n.outputs) {
            let (r, off, bytes) = place(module, graph, v);
            write!(text, "  {} {off} {bytes}", r.name()).unwrap();
        }
        text.push('\n');
    }
    for (i, &id) in graph.outputs.iter().enumerate() {
        let (r, off, bytes) = place(module, graph, id);
        writeln!(text, "store {} {off} {bytes} out{i}.bin", r.name()).unwrap();
    }
    std::fs::write(dir.join("plan.txt"), text).unwrap();
}

/// How long linking and the run under qemu took.
#[derive(Clone, Copy, Debug, Default)]
struct Timing {
    link_ms: f64,
    run_ms: f64,
}

/// Links `object` with the harness in `dir` (which holds `plan.txt`) and
/// runs it under qemu. `Err` carries the exit code and stderr.
fn link_and_run(
    cross: &Cross,
    dir: &Path,
    object: &[u8],
    symbols: &[&str],
) -> Result<Timing, (Option<i32>, String)> {
    std::fs::write(dir.join("kernels.o"), object).unwrap();
    std::fs::write(dir.join("table.c"), kernel_table(symbols)).unwrap();
    let exe = dir.join("run");
    let t0 = Instant::now();
    let o = Command::new(&cross.cc)
        .args(CFLAGS)
        .arg("-static")
        .args(&cross.harness)
        .arg(dir.join("table.c"))
        .arg(dir.join("kernels.o"))
        .arg("-lm")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the cross compiler");
    assert!(o.status.success(), "linking: {}", stderr(&o));
    let link_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let o = Command::new(&cross.qemu)
        .arg(&exe)
        .arg(dir.join("plan.txt"))
        .output()
        .expect("run qemu-aarch64");
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
    if !o.status.success() {
        return Err((o.status.code(), stderr(&o)));
    }
    Ok(Timing { link_ms, run_ms })
}

/// The outputs the harness stored, as tensors of the graph's output types.
fn read_outputs(dir: &Path, graph: &Graph) -> Vec<Tensor> {
    graph
        .outputs
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let ty = graph.ty(id);
            let bytes = std::fs::read(dir.join(format!("out{i}.bin"))).unwrap();
            Tensor::from_le_bytes(ty.dtype, ty.shape.as_fixed().unwrap(), &bytes).unwrap()
        })
        .collect()
}

/// Runs a planned graph's object under qemu and returns its outputs.
fn run_planned(
    cross: &Cross,
    dir: &Path,
    module: &Module,
    graph: &Graph,
    object: &[u8],
    kernels: &[(usize, String)],
    inputs: &[(String, Tensor)],
) -> Result<(Vec<Tensor>, Timing), (Option<i32>, String)> {
    write_plan(dir, module, graph, kernels, inputs);
    let symbols: Vec<&str> = kernels.iter().map(|(_, s)| s.as_str()).collect();
    let timing = link_and_run(cross, dir, object, &symbols)?;
    Ok((read_outputs(dir, graph), timing))
}

/// The largest relative error over all outputs, and whether every output
/// is bit for bit the reference's.
fn compare(got: &[Tensor], want: &[(String, Arc<Tensor>)]) -> (f64, bool) {
    assert_eq!(got.len(), want.len());
    let mut max_rel = 0.0f64;
    let mut exact = true;
    for (g, (name, w)) in got.iter().zip(want) {
        assert_eq!(g.shape(), w.shape(), "output `{name}`");
        exact &= g.to_le_bytes() == w.to_le_bytes();
        if g.dtype().is_float() {
            let d = diff(g, w).unwrap_or_else(|e| panic!("output `{name}`: {e}"));
            // NaN never passes.
            max_rel = max_rel.max(if d.max_rel.is_nan() {
                f64::INFINITY
            } else {
                d.max_rel
            });
        } else if g != &**w {
            max_rel = f64::INFINITY;
        }
    }
    (max_rel, exact)
}

/// A seeded generator (64-bit LCG, MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    /// Uniform in `[lo, hi)`.
    fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 29) as f32 / (1u64 << 24) as f32)
    }
}

/// Random inputs for every graph input: floats in `[-2, 2)` (inputs named
/// `%pos*` in `[0.1, 3)`), integers in `[lo, hi]` (see [`Case::ints`]),
/// `i8`/`i4` weights over their whole range, booleans true with
/// probability 3/4.
fn inputs_for(graph: &Graph, ints: (i64, i64), rng: &mut Lcg) -> Vec<(String, Tensor)> {
    graph
        .inputs
        .iter()
        .map(|&id| {
            let v = graph.value(id);
            let shape = v.ty.shape.as_fixed().unwrap();
            let n: usize = shape.iter().product();
            let t = match v.ty.dtype {
                DType::F32 => {
                    let (lo, hi) = if v.name.starts_with("pos") {
                        (0.1, 3.0)
                    } else {
                        (-2.0, 2.0)
                    };
                    Tensor::from_f32(shape, (0..n).map(|_| rng.f32(lo, hi)).collect())
                }
                DType::I64 => {
                    let span = (ints.1 - ints.0 + 1) as u64;
                    Tensor::from_i64(
                        shape,
                        (0..n)
                            .map(|_| ints.0 + (rng.next() % span) as i64)
                            .collect(),
                    )
                }
                // Quantized weights over their whole range.
                DType::I8 | DType::I4 => {
                    let lo = if v.ty.dtype == DType::I8 { -128 } else { -8 };
                    let span = (-2 * lo) as u64;
                    Tensor::from_i64(
                        shape,
                        (0..n).map(|_| lo + (rng.next() % span) as i64).collect(),
                    )
                    .cast(v.ty.dtype)
                }
                DType::Bool => Tensor::from_bool(
                    shape,
                    (0..n).map(|_| !rng.next().is_multiple_of(4)).collect(),
                ),
                d => panic!("no random {d} inputs"),
            };
            (v.name.clone(), t)
        })
        .collect()
}

/// One graph of the single-op suite.
struct Case {
    name: &'static str,
    /// The graph `@main` (static shapes), as textual IR.
    ir: String,
    /// The range of integer inputs.
    ints: (i64, i64),
    /// Whether the exact options give the reference's bits (all but
    /// attention over more keys than one tile, whose softmax is online).
    bit_exact: bool,
}

fn case(name: &'static str, inputs: &str, results: &str, body: &str) -> Case {
    Case {
        name,
        ir: format!("module @m {{\n  graph @main({inputs}) -> ({results}) {{\n{body}\n  }}\n}}\n"),
        ints: (0, 0),
        bit_exact: true,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // GEMMs: decode-sized (fewer than 4 rows, B read in place), a
        // ragged tile edge, and from 64 rows on the packed path with `k`
        // split into blocks (600 × 16 columns do not fit 32 KiB).
        case(
            "matmul 1x3x64 @ 64x50",
            "%x: f32[1, 3, 64], %w: f32[64, 50]",
            "f32[1, 3, 50]",
            "    %y = matmul %x, %w : f32[1, 3, 50]\n    return %y",
        ),
        case(
            "matmul 2x5x24 @ 24x20",
            "%x: f32[2, 5, 24], %w: f32[24, 20]",
            "f32[2, 5, 20]",
            "    %y = matmul %x, %w : f32[2, 5, 20]\n    return %y",
        ),
        case(
            "matmul 70x600 @ 600x40 (packed)",
            "%x: f32[70, 600], %w: f32[600, 40]",
            "f32[70, 40]",
            "    %y = matmul %x, %w : f32[70, 40]\n    return %y",
        ),
        case(
            "swiglu 1x5x32, 32x48",
            "%x: f32[1, 5, 32], %wg: f32[32, 48], %wu: f32[32, 48]",
            "f32[1, 5, 48]",
            "    %y = swiglu %x, %wg, %wu : f32[1, 5, 48]\n    return %y",
        ),
        case(
            "swiglu 9x64, 64x2*40 (packed, gate_up)",
            "%x: f32[9, 64], %wgu: f32[64, 80]",
            "f32[9, 40]",
            "    %y = swiglu %x, %wgu : f32[9, 40]\n    return %y",
        ),
        case(
            "attention causal gqa 4/2 heads, 5 keys",
            "%q: f32[1, 4, 5, 8], %k: f32[1, 2, 5, 8], %v: f32[1, 2, 5, 8]",
            "f32[1, 4, 5, 8]",
            "    %o = attention %q, %k, %v {kv_heads = 2, scale = 0.35, causal = true} : f32[1, 4, 5, 8]\n    return %o",
        ),
        Case {
            bit_exact: false,
            ..case(
                "attention 600 keys, window, softcap, bool mask",
                "%q: f32[1, 4, 5, 8], %k: f32[1, 2, 600, 8], %v: f32[1, 2, 600, 8], %m: bool[1, 1, 5, 600]",
                "f32[1, 4, 5, 8]",
                "    %o = attention %q, %k, %v, %m {kv_heads = 2, scale = 0.3, causal = true, window = 300, softcap = 5.0} : f32[1, 4, 5, 8]\n    return %o",
            )
        },
        Case {
            bit_exact: false,
            ..case(
                "attention 600 keys, no mask",
                "%q: f32[1, 2, 3, 16], %k: f32[1, 2, 600, 16], %v: f32[1, 2, 600, 16]",
                "f32[1, 2, 3, 16]",
                "    %o = attention %q, %k, %v {kv_heads = 2, scale = 0.25} : f32[1, 2, 3, 16]\n    return %o",
            )
        },
        case(
            "rms_norm 1x5x64",
            "%x: f32[1, 5, 64], %w: f32[64]",
            "f32[1, 5, 64], f32[1, 5, 64]",
            "    %y = rms_norm %x, %w {eps = 1e-6} : f32[1, 5, 64]\n    %z = rms_norm %x, %w {eps = 1e-5, offset = 1.0} : f32[1, 5, 64]\n    return %y, %z",
        ),
        case(
            "softmax 2x3x37 (last axis, middle axis)",
            "%x: f32[2, 3, 37]",
            "f32[2, 3, 37], f32[2, 3, 37]",
            "    %y = softmax %x {axis = -1} : f32[2, 3, 37]\n    %z = softmax %x {axis = 1} : f32[2, 3, 37]\n    return %y, %z",
        ),
        Case {
            ints: (-50, 49),
            ..case(
                "gather 50x16 table, 1x7 ids (negative too)",
                "%t: f32[50, 16], %i: i64[1, 7]",
                "f32[1, 7, 16]",
                "    %y = gather %t, %i {axis = 0} : f32[1, 7, 16]\n    return %y",
            )
        },
        case(
            "rope rotate_half 16 and interleaved 8 of 16",
            "%x: f32[1, 4, 5, 16], %c: f32[5, 16], %s: f32[5, 16], %c8: f32[5, 8], %s8: f32[5, 8]",
            "f32[1, 4, 5, 16], f32[1, 4, 5, 16]",
            "    %y = rope %x, %c, %s {rotary_dim = 16} : f32[1, 4, 5, 16]\n    %z = rope %x, %c8, %s8 {rotary_dim = 8, interleaved = true} : f32[1, 4, 5, 16]\n    return %y, %z",
        ),
        // Quantized matmuls: `i8` weights in groups, `i4` weights (packed
        // two per byte) per channel with vector strips, and in groups with
        // an odd `N` (rows not starting on a byte: one column at a time).
        case(
            "qmatmul i8 1x3x64 @ 64x50 g16",
            "%x: f32[1, 3, 64], %q: i8[64, 50], %s: f32[4, 50]",
            "f32[1, 3, 50]",
            "    %y = qmatmul %x, %q, %s {bits = 8, group = 16} : f32[1, 3, 50]\n    return %y",
        ),
        case(
            "qmatmul i4 5x48 @ 48x36 channel, 48x7 g16",
            "%x: f32[5, 48], %q: i4[48, 36], %s: f32[1, 36], %q7: i4[48, 7], %s7: f32[3, 7]",
            "f32[5, 36], f32[5, 7]",
            "    %y = qmatmul %x, %q, %s {bits = 4, group = 48} : f32[5, 36]\n    %z = qmatmul %x, %q7, %s7 {bits = 4, group = 16} : f32[5, 7]\n    return %y, %z",
        ),
        // The quantized gated MLP: two `i8` weights with vector strips and
        // a tail, and a fused `i4` gate/up weight with an odd `N` (the up
        // half's rows off byte boundaries).
        case(
            "qswiglu i8 2x3x64 -> 20 g32, i4 fused 64x2x7 g16",
            "%x: f32[2, 3, 64], %gq: i8[64, 20], %gs: f32[2, 20], %uq: i8[64, 20], %us: f32[2, 20], %q: i4[64, 14], %s: f32[4, 14]",
            "f32[2, 3, 20], f32[2, 3, 7]",
            "    %y = qswiglu %x, %gq, %gs, %uq, %us {bits = 8, group = 32} : f32[2, 3, 20]\n    %z = qswiglu %x, %q, %s {bits = 4, group = 16} : f32[2, 3, 7]\n    return %y, %z",
        ),
        // Every math helper of `backends/src/cpu/math.rs`.
        case(
            "math helpers",
            "%x: f32[3, 37], %pos: f32[3, 37]",
            "f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37], f32[3, 37]",
            "    %exp = exp %x : f32[3, 37]
    %log = log %pos : f32[3, 37]
    %erf = erf %x : f32[3, 37]
    %tanh = tanh %x : f32[3, 37]
    %sigmoid = sigmoid %x : f32[3, 37]
    %cos = cos %x : f32[3, 37]
    %sin = sin %x : f32[3, 37]
    %pow = pow %pos, %x : f32[3, 37]
    %mod = mod %x, %pos : f32[3, 37]
    %gelu = gelu %x : f32[3, 37]
    %gelu_tanh = gelu %x {approximate = \"tanh\"} : f32[3, 37]
    return %exp, %log, %erf, %tanh, %sigmoid, %cos, %sin, %pow, %mod, %gelu, %gelu_tanh",
        ),
    ]
}

/// A single-op module from IR text, planned.
fn planned(ir: &str) -> Module {
    let mut m = parse_module(ir).unwrap_or_else(|e| panic!("{e}\n{ir}"));
    run_pipeline(&mut m, "plan-memory");
    m
}

/// Every case of [`cases`], compiled with the exact options (bit for bit
/// the reference) and the default ones (FMA, vector exp: within 1e-5), run
/// under qemu against the reference interpreter on the host.
#[test]
fn single_op_objects_match_the_reference_under_qemu() {
    let Some(cross) = cross() else { return };
    let started = Instant::now();
    let mut report = String::new();
    let mut failures = Vec::new();
    let modes = [
        ("exact", CpuOptions::exact()),
        // The C harness provides the math helpers only: the quantized
        // products stay generated here (`slmcc_qgemm` in objects runs
        // through the runtime: aarch64_runtime.rs).
        (
            "default",
            CpuOptions {
                host_qgemm: false,
                ..CpuOptions::default()
            },
        ),
    ];
    for (c, case) in cases().iter().enumerate() {
        let module = planned(&case.ir);
        let graph = &module.graphs[0];
        let mut rng = Lcg(17 + c as u64);
        let inputs = inputs_for(graph, case.ints, &mut rng);
        let want = run_graph(&module, graph, &inputs, &Capture::Nothing)
            .unwrap_or_else(|e| panic!("{}: reference: {e}", case.name))
            .outputs;
        for (mode, options) in &modes {
            let dir = scratch_dir(&format!("qemu-op{c}-{mode}"));
            let obj = compile_object(graph, AARCH64_LINUX, "slmcc_t", options)
                .unwrap_or_else(|e| panic!("{} ({mode}): {e}", case.name));
            let kernels: Vec<(usize, String)> = obj
                .kernels
                .iter()
                .map(|k| (k.node, k.symbol.clone()))
                .collect();
            match run_planned(cross, &dir, &module, graph, &obj.bytes, &kernels, &inputs) {
                Ok((got, t)) => {
                    let (rel, exact) = compare(&got, &want);
                    writeln!(
                        report,
                        "{:<48} {mode:<8} max_rel {rel:.2e}{}  link {:.0} ms, qemu {:.0} ms",
                        case.name,
                        if exact { " (bit-exact)" } else { "" },
                        t.link_ms,
                        t.run_ms
                    )
                    .unwrap();
                    // The exact kernels and the C helpers do the host's
                    // operations: anything but identical bits is a bug.
                    let ok = if *mode == "exact" && case.bit_exact {
                        exact
                    } else {
                        rel < MAX_REL
                    };
                    if ok {
                        let _ = std::fs::remove_dir_all(&dir);
                    } else {
                        failures.push(format!(
                            "{} ({mode}): max_rel {rel:.3e}, bit-exact {exact} (files in {})",
                            case.name,
                            dir.display()
                        ));
                    }
                }
                Err((code, err)) => failures.push(format!(
                    "{} ({mode}): harness exit {code:?}: {err} (files in {})",
                    case.name,
                    dir.display()
                )),
            }
        }
    }
    eprintln!(
        "{report}single ops: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `slmcc_math.c` defines every helper an object may import (this needs
/// no cross toolchain, so it runs even when the qemu tests are skipped).
#[test]
fn the_c_math_helpers_cover_every_math_fn() {
    let c = std::fs::read_to_string(repo().join("compiler/tests/aarch64/slmcc_math.c")).unwrap();
    for f in MathFn::ALL {
        let symbol = f.symbol();
        assert!(
            c.lines()
                .any(|l| (l.starts_with("float ") || l.starts_with("double "))
                    && l.contains(&format!(" {symbol}("))),
            "slmcc_math.c does not define {symbol}"
        );
    }
}

/// Kernels never trap on data, on the board either: an index out of range
/// is a status the harness reports, not a fault under qemu.
#[test]
fn gather_out_of_range_is_a_status_under_qemu() {
    let Some(cross) = cross() else { return };
    let module = planned(
        "module @m {\n  graph @main(%t: f32[4, 2], %i: i64[3]) -> (f32[3, 2]) {\n    \
         %y = gather %t, %i {axis = 0} : f32[3, 2]\n    return %y\n  }\n}\n",
    );
    let graph = &module.graphs[0];
    let obj = compile_object(graph, AARCH64_LINUX, "slmcc_t", &CpuOptions::default()).unwrap();
    let kernels: Vec<(usize, String)> = obj
        .kernels
        .iter()
        .map(|k| (k.node, k.symbol.clone()))
        .collect();
    let table = Tensor::from_f32(vec![4, 2], (0..8).map(|x| x as f32).collect());
    let dir = scratch_dir("qemu-oob");
    for (ids, want) in [(vec![3, -4, 1], Ok(())), (vec![0, 4, 1], Err(Some(1)))] {
        let inputs = vec![
            ("t".to_string(), table.clone()),
            ("i".to_string(), Tensor::from_i64(vec![3], ids.clone())),
        ];
        let got = run_planned(cross, &dir, &module, graph, &obj.bytes, &kernels, &inputs);
        match (got, want) {
            (Ok((out, _)), Ok(())) => assert_eq!(
                out[0].to_f32_vec(),
                [6.0, 7.0, 0.0, 1.0, 2.0, 3.0],
                "{ids:?}"
            ),
            (Err((code, err)), Err(c)) => {
                assert_eq!(code, c, "{ids:?}: {err}");
                assert!(err.contains("failed with status"), "{err}");
            }
            (got, want) => panic!(
                "{ids:?}: got {:?}, want {want:?}",
                got.map(|(o, _)| o[0].to_f32_vec())
            ),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The whole Qwen2 test model as `slmcc compile --cpu aarch64` packages it
/// (the fusion pipeline, bucket seq = 5, planned): the package's object and
/// plan, run under qemu on the golden input, give onnxruntime's logits
/// within 1e-5, and the host reference interpreter's on the same bucket.
#[test]
fn qwen2_package_object_matches_onnxruntime_under_qemu() {
    let Some(cross) = cross() else { return };
    let started = Instant::now();
    let dir = scratch_dir("qemu-qwen2");
    let pkg = dir.join("qwen2.slmpkg");
    let o = slmcc(&[
        "compile",
        "testdata/models/qwen2.onnx",
        "--target",
        "cpu",
        "--cpu",
        "aarch64",
        "--buckets",
        "5",
        "-o",
        pkg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = Package::open(&pkg).unwrap();
    let module = p.module().unwrap();
    let [entry] = &p.manifest.buckets[..] else {
        panic!("one bucket expected, got {}", p.manifest.buckets.len());
    };
    let obj = entry.kernels.as_ref().expect("an aarch64 object");
    assert_eq!(obj.triple, AARCH64_LINUX);
    let graph = module.graph(&entry.graph).unwrap();
    for fused in ["attention", "rms_norm", "swiglu", "rope"] {
        assert!(
            graph
                .nodes
                .iter()
                .any(|n| slmcc_ir::OpDef::mnemonic(&n.op).contains(fused)),
            "no fused {fused} in @{}",
            graph.name
        );
    }
    let kernels: Vec<(usize, String)> = obj
        .symbols
        .iter()
        .map(|s| (s.node as usize, s.symbol.clone()))
        .collect();
    let ids = slmcc_runtime::npy::read(&repo().join("goldens/qwen2/seq5/input_ids.npy")).unwrap();
    let inputs = vec![("input_ids".to_string(), ids)];
    let (got, t) = run_planned(cross, &dir, &module, graph, &obj.object, &kernels, &inputs)
        .unwrap_or_else(|(code, e)| panic!("harness exit {code:?}: {e}"));
    let golden = slmcc_runtime::npy::read(&repo().join("goldens/qwen2/seq5/logits.npy")).unwrap();
    let (vs_golden, _) = compare(&got[..1], &[("logits".to_string(), Arc::new(golden))]);
    let reference = run_graph(&module, graph, &inputs, &Capture::Nothing)
        .unwrap()
        .outputs;
    let (vs_reference, _) = compare(&got, &reference);
    eprintln!(
        "qwen2 seq 5 ({} kernels): max_rel {vs_golden:.2e} vs onnxruntime, \
         {vs_reference:.2e} vs the reference interpreter; link {:.0} ms, qemu {:.0} ms, \
         {:.1} s in all",
        kernels.len(),
        t.link_ms,
        t.run_ms,
        started.elapsed().as_secs_f64()
    );
    assert!(
        vs_golden < MAX_REL,
        "logits max_rel {vs_golden} vs onnxruntime"
    );
    assert!(
        vs_reference < MAX_REL,
        "logits max_rel {vs_reference} vs the reference"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
