//! The attention kernel (`slmcc_backends::npu::kernels::attention`) in the
//! simulator against its plain-Rust reference (`attention_ref`), bit for
//! bit: random shapes, grouped KV heads, causal and windowed, keep and
//! additive masks (one row or one per query), key ranges a mask trims,
//! the default and small-CBUF targets (many query blocks and key tiles).
//! Also: within f16 rounding of the f32 IR op, the scores never stored
//! to DDR, and the timing model alone counts what a run counts.

use super::qmatmul_tests::Rng;
use super::{NpuSim, SimStats};
use proptest::prelude::*;
use slmcc_backends::npu::kernels::attention::{
    emit_attention, plan_attention, AttentionLayout, AttentionPlan, AttentionProblem, MaskKind,
};
use slmcc_backends::npu::kernels::attention_ref::{attention_reference, MaskData};
use slmcc_backends::npu::Target;
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::{DType, EvalCtx, OpDef, Tensor};

fn put_f32(ddr: &mut [u8], at: u32, v: &[f32]) {
    for (i, x) in v.iter().enumerate() {
        ddr[at as usize + 4 * i..][..4].copy_from_slice(&x.to_le_bytes());
    }
}

/// The operands of one random problem.
struct Case {
    p: AttentionProblem,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    keep: Vec<u8>,
    add: Vec<f32>,
    keys: std::ops::Range<u32>,
}

impl Case {
    fn mask(&self) -> MaskData<'_> {
        match self.p.mask {
            MaskKind::None => MaskData::None,
            MaskKind::Keep => MaskData::Keep(&self.keep),
            MaskKind::Add => MaskData::Add(&self.add),
        }
    }
}

fn case(seed: u64, small: bool) -> Case {
    let mut r = Rng(seed | 1);
    let kv_heads = r.int(1, 2) as u32;
    let heads = kv_heads * r.int(1, 3) as u32;
    let batch = r.int(1, 2) as u32;
    let s = r.int(1, if small { 40 } else { 12 }) as u32;
    let causal = r.int(0, 2) > 0;
    let t = if causal {
        s + r.int(0, 30) as u32
    } else {
        r.int(1, 50) as u32
    };
    let window = if causal && r.int(0, 2) == 0 {
        r.int(1, 12) as u32
    } else {
        0
    };
    let mask = [MaskKind::None, MaskKind::Keep, MaskKind::Add][r.int(0, 2) as usize];
    let mask_rows = if r.int(0, 1) == 0 { 1 } else { s };
    let (d, dv) = (r.int(1, 40) as u32, r.int(1, 40) as u32);
    let p = AttentionProblem {
        batch,
        heads,
        kv_heads,
        s,
        t,
        d,
        dv,
        scale: 0.05 + r.unit(),
        causal,
        window,
        softcap: if r.int(0, 2) == 0 {
            0.5 + 4.0 * r.unit()
        } else {
            0.0
        },
        mask,
        mask_rows,
    };
    let mag = [0.1f32, 1.0, 4.0][r.int(0, 2) as usize];
    let mut vals = |n: u32| -> Vec<f32> { (0..n).map(|_| (r.unit() * 2.0 - 1.0) * mag).collect() };
    let q = vals(batch * heads * s * d);
    let k = vals(batch * kv_heads * t * d);
    let v = vals(batch * kv_heads * t * dv);
    // A keep mask keeps a key range (what a KV cache's mask does) with
    // some holes; the kernel is told the range.
    let (lo, hi) = if mask == MaskKind::Keep {
        let lo = r.int(0, i64::from(t) - 1) as u32;
        (lo, r.int(i64::from(lo) + 1, i64::from(t)) as u32)
    } else {
        (0, t)
    };
    let cells = mask_rows * t;
    let keep: Vec<u8> = (0..cells)
        .map(|c| {
            let j = c % t;
            u8::from((lo..hi).contains(&j) && r.int(0, 7) > 0)
        })
        .collect();
    let add: Vec<f32> = (0..cells)
        .map(|_| match r.int(0, 5) {
            0 => f32::NEG_INFINITY,
            1 => f32::MIN,
            _ => r.unit() - 0.5,
        })
        .collect();
    Case {
        p,
        q,
        k,
        v,
        keep,
        add,
        keys: lo..hi,
    }
}

/// Runs the kernel for `c` on `target`; returns the output, the plan and
/// the statistics (checked against the timing-only run).
fn run(c: &Case, target: &Target) -> (Vec<f32>, AttentionPlan, SimStats) {
    let plan = plan_attention(&c.p, target).unwrap();
    let layout = AttentionLayout::new(&c.p).unwrap();
    let prog = emit_attention(&plan, target, &layout, c.keys.clone()).unwrap();
    assert_eq!(prog.cores.len(), plan.cores as usize, "{plan:?}");
    let mut ddr = vec![0u8; layout.total as usize];
    ddr[layout.params as usize..][..16].copy_from_slice(&AttentionLayout::params_record(&c.p));
    put_f32(&mut ddr, layout.q, &c.q);
    put_f32(&mut ddr, layout.k, &c.k);
    put_f32(&mut ddr, layout.v, &c.v);
    match (c.p.mask, layout.mask) {
        (MaskKind::Keep, Some(m)) => {
            ddr[m as usize..][..c.keep.len()].copy_from_slice(&c.keep);
        }
        (MaskKind::Add, Some(m)) => put_f32(&mut ddr, m, &c.add),
        _ => {}
    }
    let mut sim = NpuSim::new(target.clone(), ddr);
    let stats = sim.run(&prog).unwrap();
    assert_eq!(NpuSim::time(target, &prog).unwrap(), stats);
    let n = (c.p.batch * c.p.heads * c.p.s * c.p.dv) as usize;
    let out = sim.ddr[layout.out as usize..][..4 * n]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    // Only the output is written: the scores stay in CBUF.
    assert_eq!(stats.ddr_bytes_written, 4 * n as u64);
    (out, plan, stats)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check(seed: u64, target: &Target, small: bool) {
    let c = case(seed, small);
    let (out, plan, _) = run(&c, target);
    let want = attention_reference(&c.p, plan.nk as usize, &c.q, &c.k, &c.v, c.mask());
    assert_eq!(bits(&out), bits(&want), "{:?} plan {plan:?}", c.p);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bit_exact_with_the_reference(seed in any::<u64>()) {
        check(seed, &Target::rk3588(), false);
    }

    #[test]
    fn bit_exact_with_small_cbufs(seed in any::<u64>(), banks in 2u32..5) {
        // Down to a few KiB: many query blocks and key tiles of 8.
        check(seed, &Target::rk3588().with_cbuf(banks, 4096), true);
    }
}

/// The IR op on the same operands (f32 throughout).
fn ir_attention(c: &Case) -> Vec<f32> {
    let p = &c.p;
    let op = Attention {
        kv_heads: i64::from(p.kv_heads),
        scale: p.scale,
        causal: p.causal,
        window: i64::from(p.window),
        softcap: p.softcap,
    };
    let t = |shape: [u32; 4], v: &[f32]| {
        Tensor::from_f32(shape.iter().map(|&x| x as usize).collect(), v.to_vec())
    };
    let q = t([p.batch, p.heads, p.s, p.d], &c.q);
    let k = t([p.batch, p.kv_heads, p.t, p.d], &c.k);
    let v = t([p.batch, p.kv_heads, p.t, p.dv], &c.v);
    let mshape = vec![1, 1, p.mask_rows as usize, p.t as usize];
    let mask = match p.mask {
        MaskKind::None => None,
        MaskKind::Keep => {
            let b: Vec<f64> = c.keep.iter().map(|&x| f64::from(x)).collect();
            Some(Tensor::from_f64(DType::Bool, mshape, &b).unwrap())
        }
        MaskKind::Add => Some(Tensor::from_f32(mshape, c.add.clone())),
    };
    let mut inputs = vec![&q, &k, &v];
    inputs.extend(mask.as_ref());
    let out = op.eval(&inputs, &EvalCtx::default()).unwrap().remove(0);
    out.as_f32().unwrap().to_vec()
}

/// The bound the kernel's arithmetic puts on its distance from the f32
/// op. A score is `hi·hi + hi·lo + lo·hi` of `q`'s and `k`'s f16 halves
/// summed in f32: it misses `lo·lo` (2^-22 relative per product) and three
/// f32 sums of `d` terms round, so it moves by at most
/// `δ = scale · max Σ_c |q_c|·|k_c| · (3d + 8) · 2^-24`, which moves each
/// softmax weight by a factor within `e^{±2δ}`; rounding `p` and `v` to
/// f16 (unit roundoff `u = 2^-11`) adds `2u` of `max |v|`, the sums a few
/// f32 roundings more. So `|out - op| <= max|v| · (e^{2δ} - 1 + 3u)`.
fn f16_bound(c: &Case) -> f32 {
    let p = &c.p;
    let (d, u) = (p.d as usize, 2f32.powi(-11));
    let mut worst = 0f32;
    for qrow in c.q.chunks_exact(d) {
        for krow in c.k.chunks_exact(d) {
            let s: f32 = qrow.iter().zip(krow).map(|(a, b)| (a * b).abs()).sum();
            worst = worst.max(s);
        }
    }
    let delta = p.scale * worst * (3 * d + 8) as f32 * 2f32.powi(-24);
    let vmax = c.v.iter().fold(0f32, |m, x| m.max(x.abs()));
    vmax * ((2.0 * delta).exp() - 1.0 + 3.0 * u) + 1e-30
}

#[test]
fn within_the_f16_bound_of_the_ir_op() {
    let (mut worst, mut worst_v) = (0f32, 0f32);
    for seed in 0..200u64 {
        let c = case(seed * 7919 + 3, true);
        let (out, _, _) = run(&c, &Target::rk3588());
        let want = ir_attention(&c);
        let bound = f16_bound(&c);
        let vmax = c.v.iter().fold(0f32, |m, x| m.max(x.abs()));
        for (a, b) in out.iter().zip(&want) {
            let e = (a - b).abs();
            assert!(e <= bound, "{:?}: error {e} > bound {bound}", c.p);
            worst = worst.max(e / bound);
            worst_v = worst_v.max(e / vmax);
        }
    }
    eprintln!("attention on the NPU vs the f32 op: worst error {worst_v:.3e} of max |v|, {worst:.2} of the bound");
    assert!(worst > 0.0, "f16 rounding shows somewhere");
}

#[test]
fn a_decode_step_reads_only_the_kept_keys() {
    // Qwen2-1.5B's shape: 12 query heads over 2 KV heads of 128, one
    // query against a cache of 1024 slots of which 100 are filled.
    let p = AttentionProblem {
        batch: 1,
        heads: 12,
        kv_heads: 2,
        s: 1,
        t: 1024,
        d: 128,
        dv: 128,
        scale: 0.088,
        causal: false,
        window: 0,
        softcap: 0.0,
        mask: MaskKind::Keep,
        mask_rows: 1,
    };
    let target = Target::rk3588();
    let plan = plan_attention(&p, &target).unwrap();
    let layout = AttentionLayout::new(&p).unwrap();
    let time = |keys| {
        let prog = emit_attention(&plan, &target, &layout, keys).unwrap();
        NpuSim::time(&target, &prog).unwrap()
    };
    let (all, filled) = (time(0..1024), time(0..100));
    assert_eq!(plan.cores, 2);
    assert_eq!(
        plan.stack, 6,
        "the 6 query heads of a KV head share its tiles"
    );
    // K and V of the 2 KV heads, once per group: 2 × 2 × keys × 128 × 4
    // bytes, plus q (12 × 128 × 4), the mask row (read for each of the 6
    // stacked rows of a block) and the parameters.
    let kv = |keys: u64| 2 * 2 * keys * 128 * 4;
    let rest = |keys: u64| 12 * 128 * 4 + 2 * 6 * keys + 2 * 16;
    assert_eq!(all.ddr_bytes_read, kv(1024) + rest(1024), "{all:?}");
    assert_eq!(filled.ddr_bytes_read, kv(100) + rest(100), "{filled:?}");
    assert!(filled.cycles * 4 < all.cycles, "{filled:?} vs {all:?}");
}
