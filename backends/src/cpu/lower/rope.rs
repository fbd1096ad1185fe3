//! `rope` (`f32`): the rotary embedding of the first `rotary_dim` channels
//! of `[b, h, s, d]`, non-interleaved (`rotate_half`) or interleaved
//! (GPT-J pairs), with `[s, r]`, `[b', s, r]` or `[b', h', s, r]` cos/sin
//! tables read through broadcast strides; channels `rotary_dim..d` are
//! copied.
//!
//! Every output element is `x·C + rot(x)·S` with the reference's
//! operations (`rot` negates by `fneg`, then two products and a sum), so
//! results are bit-exact. Non-interleaved rows run in `f32x4` vectors over
//! each half (both halves in one pass); interleaved rows run on scalars
//! (pairs are two channels apart in memory).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::DType;

use super::movement::copy;
use super::{unsupported, NodeSig};
use crate::cpu::emit::{Access, KernelBuilder};
use crate::cpu::CpuError;

fn acc(base: Value, strides: Vec<i64>) -> Access {
    Access {
        base,
        strides,
        elem_bytes: 4,
    }
}

/// `x·c + rot·s`, with `rot` already negated where the rotation says so.
fn rotate(kb: &mut KernelBuilder, x: Value, c: Value, rot: Value, s: Value) -> Value {
    let a = kb.b.ins().fmul(x, c);
    let b = kb.b.ins().fmul(rot, s);
    kb.b.ins().fadd(a, b)
}

pub fn rope(kb: &mut KernelBuilder, op: &Rope, sig: &NodeSig) -> Result<(), CpuError> {
    let x = &sig.inputs[0];
    if x.dtype != DType::F32 {
        return Err(unsupported("rope", format!("on {}", x.dtype)));
    }
    let [b, h, s, d] = x.shape[..] else {
        return Err(unsupported("rope", "with x not of rank 4"));
    };
    let r = op.rotary_dim as usize;
    let half = r / 2;
    let (si, ri, di) = (s as i64, r as i64, d as i64);
    // The table as [b', h', s, r], broadcast over batch and heads.
    let tst = match sig.inputs[1].shape[..] {
        [_, _] => vec![0, 0, ri, 1],
        [tb, _, _] => vec![if tb == 1 { 0 } else { si * ri }, 0, ri, 1],
        [tb, th, _, _] => vec![
            if tb == 1 { 0 } else { th as i64 * si * ri },
            if th == 1 { 0 } else { si * ri },
            ri,
            1,
        ],
        _ => return Err(unsupported("rope", "with tables not of rank 2, 3 or 4")),
    };
    let xst = vec![h as i64 * si * di, si * di, di];
    let rows = [
        acc(kb.buf(0), xst.clone()),
        acc(kb.buf(1), tst[..3].to_vec()),
        acc(kb.buf(2), tst[..3].to_vec()),
        acc(kb.buf(3), xst),
    ];
    let interleaved = op.interleaved;
    kb.nest(&[b, h, s], &rows, None, |kb, p, _| {
        let (xr, cr, sr, yr) = (p[0].addr, p[1].addr, p[2].addr, p[3].addr);
        // The pair (first, second) of each rotation: (2m, 2m + 1) with
        // stride 2 when interleaved (scalar steps), else (m, m + half) with
        // stride 1 (f32x4 steps).
        let (second, stride, width) = if interleaved {
            (4, 2, None)
        } else {
            ((half * 4) as i64, 1, Some(4))
        };
        let at = |kb: &mut KernelBuilder, base: Value, hi: bool| {
            acc(kb.offset(base, if hi { second } else { 0 }), vec![stride])
        };
        let accesses = [
            at(kb, xr, false),
            at(kb, xr, true),
            at(kb, cr, false),
            at(kb, cr, true),
            at(kb, sr, false),
            at(kb, sr, true),
            at(kb, yr, false),
            at(kb, yr, true),
        ];
        kb.nest(&[half], &accesses, width, |kb, q, w| {
            let v: Vec<Value> = q[..6]
                .iter()
                .map(|&pp| kb.load(types::F32, pp, w))
                .collect();
            let (x1, x2, c1, c2, s1, s2) = (v[0], v[1], v[2], v[3], v[4], v[5]);
            let nx2 = kb.b.ins().fneg(x2);
            let y1 = rotate(kb, x1, c1, nx2, s1);
            let y2 = rotate(kb, x2, c2, x1, s2);
            kb.store(y1, q[6]);
            kb.store(y2, q[7]);
            Ok(())
        })?;
        if d > r {
            let (src, dst) = (kb.offset(xr, ri * 4), kb.offset(yr, ri * 4));
            copy(kb, &[d - r], 4, src, vec![1], dst, vec![1])?;
        }
        Ok(())
    })
}
