//! The KV cache ops on the cpu backend (`kv_write`, `kv_mask`) against
//! their reference evaluation, bit for bit: random shapes, capacities and
//! positions, with and without sinks and a window, `f32` and `f16` caches
//! and entries, the result in place of the cache or in a buffer of its
//! own, and the context-full status. Then `attention` under the mask
//! `kv_mask` builds, and a prefill and decode steps through the three ops
//! together.

mod common;

use common::{assert_same, check, check_with, one_node, run_jit, Expect, Kind, Lcg};
use proptest::prelude::*;
use slmcc_backends::cpu::{CpuOptions, JitProgram};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::kv_cache::{KvLayout, KvMask, KvWrite};
use slmcc_ir::{DType, EvalCtx, Op, OpDef, Tensor};

use Kind::Input;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    }
}

/// A layout and its capacity: no window (`C` in `1..=20`), `sinks` in
/// `0..=3` and `window` in `1..=8`, or a ring sized for a model's sliding
/// window (no sinks, `span` in `1..=window`); a span of up to `C` on the
/// first kind too.
fn layout_and_capacity(rng: &mut Lcg) -> (KvLayout, usize) {
    match rng.below(4) {
        0 => {
            let c = 1 + rng.below(20) as usize;
            let span = rng.below(c as u64 + 1) as i64;
            let l = KvLayout {
                span,
                ..KvLayout::default()
            };
            (l, c)
        }
        1 => {
            let window = 1 + rng.below(8) as i64;
            let span = 1 + rng.below(window as u64) as i64;
            let l = KvLayout {
                sinks: 0,
                window,
                span,
            };
            (l, window as usize)
        }
        _ => {
            let sinks = rng.below(4) as i64;
            let window = 1 + rng.below(8) as i64;
            let l = KvLayout {
                sinks,
                window,
                span: 0,
            };
            (l, (sinks + window) as usize)
        }
    }
}

/// Values of every kind for the entries: ordinary ones, and random bit
/// patterns (subnormals, values that round to a tie in `f16`, overflow,
/// infinities and NaNs).
fn entries(rng: &mut Lcg, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| match rng.below(3) {
            0 => f32::from_bits(rng.next_u64() as u32),
            // Tie cases of f32 → f16: 12 dropped bits exactly half.
            1 => f32::from_bits((rng.next_u64() as u32 & 0xffff_e000) | 0x1000),
            _ => rng.f32() * 8.0,
        })
        .collect();
    Tensor::from_f32(shape.to_vec(), v)
}

/// The position operand: rank 0 or `[1]`.
fn position(rng: &mut Lcg, p: i64) -> Tensor {
    if rng.below(2) == 0 {
        Tensor::scalar_i64(p)
    } else {
        Tensor::from_i64(vec![1], vec![p])
    }
}

/// A position around the interesting places: the start, the sinks, the
/// capacity (context full without a window), several turns of a ring.
fn some_position(rng: &mut Lcg, layout: &KvLayout, c: usize, s: usize) -> i64 {
    let c = c as i64;
    match rng.below(6) {
        0 => -1 - rng.below(3) as i64,
        1 => layout.sinks + rng.below(2) as i64 - 1,
        2 => c - s as i64 + rng.below(3) as i64,
        _ if layout.window == 0 => rng.below(c as u64 + 1) as i64,
        _ => rng.below(5 * c as u64) as i64,
    }
}

/// Runs `op` through the simple executor and the reference: equal bytes,
/// or both failing because the position has no slot.
fn check_write(op: KvWrite, operands: &[(Tensor, Kind)]) {
    let refs: Vec<&Tensor> = operands.iter().map(|(t, _)| t).collect();
    let want = Op::from(op).eval(&refs, &EvalCtx::default());
    let got = run_jit(&Op::from(op), operands, CpuOptions::default());
    match (got, want) {
        (Ok(g), Ok(w)) => {
            assert_eq!(g[0].dtype(), w[0].dtype());
            assert_eq!(g[0].shape(), w[0].shape());
            let (gb, wb) = (g[0].to_le_bytes(), w[0].to_le_bytes());
            let eb = gb.len() / g[0].len().max(1);
            let first =
                (0..gb.len() / eb.max(1)).find(|&i| gb[i * eb..][..eb] != wb[i * eb..][..eb]);
            assert!(
                first.is_none(),
                "kv_write {op:?} on {:?} at {:?}: element {first:?}: jit {:?} vs reference {:?}",
                shapes(operands),
                operands[2].0,
                first.map(|i| &gb[i * eb..][..eb]),
                first.map(|i| &wb[i * eb..][..eb]),
            );
        }
        (Err(g), Err(w)) => {
            assert!(w.0.contains("context is full"), "{w}");
            assert!(g.to_string().contains("the context is full"), "{g}");
        }
        (g, w) => panic!(
            "kv_write {op:?} on {:?}: jit {g:?} vs reference {w:?}",
            shapes(operands)
        ),
    }
}

fn shapes(operands: &[(Tensor, Kind)]) -> Vec<(DType, Vec<usize>)> {
    operands
        .iter()
        .map(|(t, _)| (t.dtype(), t.shape().to_vec()))
        .collect()
}

/// Calls the one kernel of `op` on raw buffers: `cache`, `new`, `pos`,
/// and the result `out` (or the cache itself when `out` is `None`).
/// Returns the status and the bytes of the result buffer.
fn call_kernel(
    op: KvWrite,
    operands: &[Tensor; 3],
    out: Option<Vec<u8>>,
) -> (i32, Vec<u8>, Vec<u8>) {
    let kinds: Vec<(Tensor, Kind)> = operands.iter().map(|t| (t.clone(), Input)).collect();
    let module = one_node(&Op::from(op), &kinds).unwrap();
    let program = JitProgram::compile(&module.graphs[0], &CpuOptions::default()).unwrap();
    assert_eq!(program.kernels.len(), 1);
    let mut cache = operands[0].to_le_bytes();
    let mut new = operands[1].to_le_bytes();
    let mut pos = operands[2].to_le_bytes();
    let mut out = out;
    let out_ptr = match &mut out {
        Some(o) => o.as_mut_ptr(),
        None => cache.as_mut_ptr(),
    };
    let ptrs = [
        cache.as_mut_ptr(),
        new.as_mut_ptr(),
        pos.as_mut_ptr(),
        out_ptr,
    ];
    // SAFETY: the kernel was compiled for these operand types; each buffer
    // holds its value's bytes; the result is the cache's size (or is the
    // cache, which `kv_write` allows).
    let status = unsafe { (program.kernels[0].func)(ptrs.as_ptr()) };
    (status, cache, out.unwrap_or_default())
}

const DTYPES: [(DType, DType); 4] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F32),
    (DType::F32, DType::F16),
    (DType::F16, DType::F16),
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn kv_write_matches_eval(b in 1usize..=2, h in 1usize..=3, d in 1usize..=19, s in 1usize..=12, seed: u64) {
        let mut rng = Lcg(seed);
        let (layout, c) = layout_and_capacity(&mut rng);
        let s = if layout.window == 0 { s.min(c + 1) } else { s };
        let op = KvWrite { layout };
        let cache = rng.tensor(&[b, h, c, d], 4.0);
        let new = entries(&mut rng, &[b, h, s, d]);
        for _ in 0..3 {
            let p = some_position(&mut rng, &layout, c, s);
            let pos = position(&mut rng, p);
            for (cd, nd) in DTYPES {
                check_write(op, &[(cache.cast(cd), Input), (new.cast(nd), Input), (pos.clone(), Input)]);
            }
        }
    }

    #[test]
    fn kv_write_in_place_matches_eval(h in 1usize..=3, d in 1usize..=19, s in 1usize..=6, seed: u64) {
        let mut rng = Lcg(seed);
        let (layout, c) = layout_and_capacity(&mut rng);
        let s = if layout.window == 0 { s.min(c) } else { s };
        let op = KvWrite { layout };
        let p = match layout.window {
            0 => rng.below((c - s) as u64 + 1) as i64,
            _ => rng.below(4 * c as u64) as i64,
        };
        for (cd, nd) in DTYPES {
            let cache = rng.tensor(&[1, h, c, d], 4.0).cast(cd);
            let new = entries(&mut rng, &[1, h, s, d]).cast(nd);
            let pos = position(&mut rng, p);
            let want = op.eval(&[&cache, &new, &pos], &EvalCtx::default()).unwrap();
            let (status, in_place, _) = call_kernel(op, &[cache.clone(), new.clone(), pos.clone()], None);
            prop_assert_eq!(status, 0);
            prop_assert!(in_place == want[0].to_le_bytes(), "in place, {:?} {:?}", cd, nd);
        }
    }

    #[test]
    fn kv_mask_matches_eval(s in 1usize..=9, seed: u64) {
        let mut rng = Lcg(seed);
        let (layout, c) = layout_and_capacity(&mut rng);
        let op = KvMask { layout };
        let (h, d) = (1 + rng.below(2) as usize, 1 + rng.below(3) as usize);
        let cache = Tensor::zeros(DType::F16, vec![1, h, c, d]);
        let new = Tensor::zeros(DType::F32, vec![1, h, s, d]);
        for _ in 0..4 {
            // Anywhere, negative and past the capacity included (the mask
            // never fails).
            let p = rng.below(6 * c as u64 + 10) as i64 - 5;
            let pos = position(&mut rng, p);
            check(op, &[(cache.clone(), Input), (new.clone(), Input), (pos, Input)], Expect::Exact);
        }
    }
}

/// The result's own buffer gets the whole cache, then the new rows; a
/// full context returns the status and leaves both buffers untouched.
#[test]
fn kv_write_out_of_place_and_context_full() {
    let mut rng = Lcg(7);
    let op = KvWrite::default();
    let cache = rng.tensor(&[1, 2, 8, 5], 1.0);
    let new = rng.tensor(&[1, 2, 3, 5], 1.0);
    let sentinel = vec![0xa5u8; cache.to_le_bytes().len()];
    for p in [0, 4, 5] {
        let pos = Tensor::scalar_i64(p);
        let want = op.eval(&[&cache, &new, &pos], &EvalCtx::default()).unwrap();
        let operands = [cache.clone(), new.clone(), pos];
        let (status, kept, out) = call_kernel(op, &operands, Some(sentinel.clone()));
        assert_eq!(status, 0);
        assert_eq!(out, want[0].to_le_bytes(), "pos {p}");
        assert_eq!(kept, cache.to_le_bytes(), "the cache operand is read only");
    }
    for p in [6, 100, -1, i64::MAX, i64::MIN] {
        let pos = Tensor::scalar_i64(p);
        let operands = [cache.clone(), new.clone(), pos];
        let (status, kept, out) = call_kernel(op, &operands, Some(sentinel.clone()));
        assert_eq!(
            status as i64,
            slmcc_backends::cpu::emit::STATUS_CONTEXT_FULL,
            "pos {p}"
        );
        assert_eq!(out, sentinel, "pos {p}: nothing written");
        assert_eq!(kept, cache.to_le_bytes());
        let (status, kept, _) = call_kernel(op, &operands, None);
        assert_eq!(
            status as i64,
            slmcc_backends::cpu::emit::STATUS_CONTEXT_FULL
        );
        assert_eq!(
            kept,
            cache.to_le_bytes(),
            "pos {p}: in place, nothing written"
        );
    }
    // Through the executor, the status is an error that says why.
    let e = run_jit(
        &Op::from(op),
        &[(cache, Input), (new, Input), (Tensor::scalar_i64(6), Input)],
        CpuOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("the context is full"), "{e}");
}

/// A ring with a window: negative positions have no slot; huge ones do.
#[test]
fn kv_write_ring_positions() {
    let mut rng = Lcg(11);
    let op = KvWrite {
        layout: KvLayout {
            sinks: 2,
            window: 5,
            span: 0,
        },
    };
    let cache = rng.tensor(&[1, 1, 7, 4], 1.0);
    let new = rng.tensor(&[1, 1, 11, 4], 1.0);
    for p in [0, 1, 2, 3, 6, 7, 40, 1 << 40] {
        check_write(
            op,
            &[
                (cache.clone(), Input),
                (new.clone(), Input),
                (Tensor::scalar_i64(p), Input),
            ],
        );
    }
    let (status, ..) = call_kernel(op, &[cache, new, Tensor::scalar_i64(-1)], None);
    assert_eq!(
        status as i64,
        slmcc_backends::cpu::emit::STATUS_CONTEXT_FULL
    );
}

/// `f32 → f16` in the cache rounds every pattern as the reference does:
/// a sweep over exponents and the bits around the rounding point.
#[test]
fn kv_write_f16_rounding_sweep() {
    let mut v = Vec::new();
    for e in 90u32..=160 {
        for low in [
            0u32, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7f_ffff,
        ] {
            for m in [0u32, 0x2000, 0x40_0000, 0x7f_e000] {
                let bits = (e << 23) | ((m | low) & 0x7f_ffff);
                v.push(f32::from_bits(bits));
                v.push(-f32::from_bits(bits));
            }
        }
    }
    v.extend([
        0.0,
        -0.0,
        65504.0,
        65519.99,
        65520.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7fa0_0001),
        f32::from_bits(0xffc0_2000),
        f32::from_bits(1),
    ]);
    let n = v.len();
    let new = Tensor::from_f32(vec![1, 1, 1, n], v);
    let cache = Tensor::zeros(DType::F16, vec![1, 1, 3, n]);
    check_write(
        KvWrite::default(),
        &[(cache, Input), (new, Input), (Tensor::scalar_i64(1), Input)],
    );
}

/// No new entries: the cache is copied, nothing else (any position).
#[test]
fn kv_write_and_mask_with_no_entries() {
    let mut rng = Lcg(3);
    let cache = rng.tensor(&[1, 2, 6, 3], 1.0);
    let new = Tensor::zeros(DType::F32, vec![1, 2, 0, 3]);
    for layout in [
        KvLayout::default(),
        KvLayout {
            sinks: 1,
            window: 5,
            span: 0,
        },
    ] {
        for p in [-3, 0, 9] {
            let pos = Tensor::scalar_i64(p);
            let ops = [(cache.clone(), Input), (new.clone(), Input), (pos, Input)];
            check_write(KvWrite { layout }, &ops);
            check(KvMask { layout }, &ops, Expect::Exact);
        }
    }
}

/// `attention` reads a `[1, 1, s, C]` bool mask from `kv_mask`: with most
/// of a 64-slot cache masked, bit-exact in exact mode and within 1e-6 by
/// default, for one query (decode) and five (prefill of a chunk).
#[test]
fn attention_under_the_cache_mask() {
    let mut rng = Lcg(21);
    let (hq, hkv, d, c) = (4, 2, 16, 64);
    for s in [1usize, 5] {
        for (layout, p) in [
            (KvLayout::default(), 0),
            (KvLayout::default(), 3),
            (KvLayout::default(), 40),
            (
                KvLayout {
                    sinks: 0,
                    window: 64,
                    span: 8,
                },
                90,
            ),
            (
                KvLayout {
                    sinks: 4,
                    window: 60,
                    span: 0,
                },
                7,
            ),
            (
                KvLayout {
                    sinks: 4,
                    window: 60,
                    span: 0,
                },
                130,
            ),
        ] {
            let pos = Tensor::scalar_i64(p);
            let k = rng.tensor(&[1, hkv, c, d], 1.0);
            let v = rng.tensor(&[1, hkv, c, d], 1.0);
            let q = rng.tensor(&[1, hq, s, d], 1.0);
            let new = Tensor::zeros(DType::F32, vec![1, hkv, s, d]);
            let mask = KvMask { layout }
                .eval(&[&k, &new, &pos], &EvalCtx::default())
                .unwrap()
                .remove(0);
            let op = Attention::new(hkv as i64, 0.25);
            let operands = [(q, Input), (k, Input), (v, Input), (mask, Input)];
            check(op, &operands, Expect::Exact);
            check_with(op, &operands, Expect::Rel(1e-6), CpuOptions::default());
        }
    }
}

/// A prefill of 5 tokens, then decode steps, each a graph of `kv_write`
/// (keys and values), `kv_mask` and `attention`, the written caches fed
/// back as the next step's: equal to the reference step by step, byte for
/// byte, f32, f16 and i8 (q8 rows) caches (attention reading the f16 and
/// i8 ones as stored), with and without a ring.
#[test]
fn prefill_then_decode_steps() {
    for (dt, sinks, window, cap) in [
        ("f32", 0, 0, 16),
        ("f16", 0, 0, 16),
        ("f32", 2, 6, 8),
        ("f16", 1, 4, 5),
        ("i8", 0, 0, 16),
        ("i8", 1, 4, 5),
    ] {
        // A q8 row holds 8 values and its 4-byte scale.
        let row = if dt == "i8" { 12 } else { 8 };
        let attrs = if window > 0 {
            format!(" {{sinks = {sinks}, window = {window}}}")
        } else {
            String::new()
        };
        let graph = |s: usize| {
            let src = format!(
                r#"module @m {{
  graph @step(%q: f32[1, 4, {s}, 8], %k: f32[1, 2, {s}, 8], %v: f32[1, 2, {s}, 8], %pos: i64[], %pk: {dt}[1, 2, {cap}, {row}], %pv: {dt}[1, 2, {cap}, {row}]) -> (f32[1, 4, {s}, 8], {dt}[1, 2, {cap}, {row}], {dt}[1, 2, {cap}, {row}]) {{
    %kc = kv_write %pk, %k, %pos{attrs} : {dt}[1, 2, {cap}, {row}]
    %vc = kv_write %pv, %v, %pos{attrs} : {dt}[1, 2, {cap}, {row}]
    %m = kv_mask %kc, %k, %pos{attrs} : bool[1, 1, {s}, {cap}]
    %o = attention %q, %kc, %vc, %m {{kv_heads = 2, scale = 0.35}} : f32[1, 4, {s}, 8]
    return %o, %kc, %vc
  }}
}}"#
            );
            slmcc_ir::text::parse_module(&src).unwrap()
        };
        let dtype = match dt {
            "f32" => DType::F32,
            "f16" => DType::F16,
            _ => DType::I8,
        };
        let mut rng = Lcg(99);
        let mut pk = Tensor::zeros(dtype, vec![1, 2, cap, row]);
        let mut pv = pk.clone();
        let mut at = 0i64;
        let prefill = graph(5);
        let decode = graph(1);
        let mut steps = vec![(&prefill, 5usize)];
        steps.extend(std::iter::repeat_n((&decode, 1usize), 12));
        for (module, s) in steps {
            let inputs = vec![
                ("q".to_string(), rng.tensor(&[1, 4, s, 8], 1.0)),
                ("k".to_string(), rng.tensor(&[1, 2, s, 8], 1.0)),
                ("v".to_string(), rng.tensor(&[1, 2, s, 8], 1.0)),
                ("pos".to_string(), Tensor::scalar_i64(at)),
                ("pk".to_string(), pk.clone()),
                ("pv".to_string(), pv.clone()),
            ];
            let want = reference(&module.graphs[0], &inputs);
            let got = common::run_module(module, &inputs, &CpuOptions::exact());
            if window == 0 && at + s as i64 > cap as i64 {
                assert!(want.is_err());
                let e = got.unwrap_err();
                assert!(e.to_string().contains("the context is full"), "{e}");
                break;
            }
            let got = got.unwrap();
            let want = want.unwrap();
            for ((_, g), w) in got.iter().zip(&want) {
                assert_eq!(g.to_le_bytes(), w.to_le_bytes(), "{dt} step at {at}");
            }
            assert_same(&got[0].1, &want[0], Expect::Exact, "attention");
            pk = got[1].1.clone();
            pv = got[2].1.clone();
            at += s as i64;
        }
    }
}

/// Evaluates a graph node by node with the reference ops.
fn reference(
    g: &slmcc_ir::Graph,
    inputs: &[(String, Tensor)],
) -> Result<Vec<Tensor>, slmcc_ir::OpError> {
    let mut vals: Vec<Option<Tensor>> = vec![None; g.value_count()];
    for &id in &g.inputs {
        let name = &g.value(id).name;
        let t = inputs.iter().find(|(n, _)| n == name).unwrap();
        vals[id.index()] = Some(t.1.clone());
    }
    for node in &g.nodes {
        let args: Vec<&Tensor> = node
            .inputs
            .iter()
            .map(|v| vals[v.index()].as_ref().unwrap())
            .collect();
        let outs = node.op.eval(&args, &EvalCtx::default())?;
        for (v, t) in node.outputs.iter().zip(outs) {
            vals[v.index()] = Some(t);
        }
    }
    Ok(g.outputs
        .iter()
        .map(|v| vals[v.index()].clone().unwrap())
        .collect())
}

/// The kernels also compile for the board's target (an AOT object).
#[test]
fn kernels_compile_for_aarch64() {
    use slmcc_backends::cpu::aot::{compile_object, AARCH64_LINUX};
    for (cache, new, attrs) in [
        ("f32", "f32", ""),
        ("f16", "f32", " {sinks = 2, window = 6}"),
        ("f32", "f16", ""),
    ] {
        let cap = if attrs.is_empty() { 16 } else { 8 };
        let src = format!(
            r#"module @m {{
  graph @step(%k: {new}[1, 2, 3, 8], %pos: i64[1], %pk: {cache}[1, 2, {cap}, 8]) -> ({cache}[1, 2, {cap}, 8], bool[1, 1, 3, {cap}]) {{
    %kc = kv_write %pk, %k, %pos{attrs} : {cache}[1, 2, {cap}, 8]
    %m = kv_mask %kc, %k, %pos{attrs} : bool[1, 1, 3, {cap}]
    return %kc, %m
  }}
}}"#
        );
        let m = slmcc_ir::text::parse_module(&src).unwrap();
        compile_object(&m.graphs[0], AARCH64_LINUX, "k", &CpuOptions::default()).unwrap();
    }
}
