//! W8A8 `qmatmul` on an NPU device through the register interface: the
//! integer products on the NPU, tiled into single tasks, and the rest of
//! the op on the CPU, bit-exact with the reference (`slmcc_ir`'s
//! `QMatMul`, whose module doc gives the semantics).
//!
//! Contract: [`NpuQMatMul::new`] takes the quantized weights and packs them
//! in tile order (the compile-time part). [`NpuQMatMul::load`] writes them
//! to a device once and allocates the buffers that every run reuses.
//! [`NpuQMatMul::run`] does the rest on the CPU:
//!
//! 1. It quantizes each row of `x` as the reference does (`s`, `z`, `xq`).
//! 2. It packs the rows into feature cubes.
//! 3. It runs every task, each giving `Σ xq·q` over one K block (a part
//!    of a group).
//! 4. It adds up each group's blocks and subtracts `z · Σ q` (the group's
//!    column sums, computed with the weights).
//! 5. It applies the scales in the reference's order.
//!
//! Steps 3 and 4 are exact in integers, so the result equals the
//! reference's bit for bit. A K block never straddles two groups, since a
//! group's scale applies to that group's sum. A group that is not a
//! multiple of 32 channels is padded with zero channels, and N with zero
//! kernels to a multiple of 16: zeros add nothing to any sum. The NPU does no part of the
//! dequantization yet; that needs the DPU stages, which no public run has
//! shown.

use slmcc_backends::npu::regcmd::layout::{cube_len, pack_cube, pack_weights, unpack_cube};
use slmcc_backends::npu::regcmd::matmul::{K_ALIGN, N_ALIGN};
use slmcc_backends::npu::regcmd::tiling::{Tile, TilePlan};
use slmcc_backends::npu::regcmd::{encode_buffer, MatmulError, MatmulPrecision, WORD_BYTES};
use slmcc_ir::ops::qmatmul::{activation_params, quantize_activation};

use crate::npu_device::{DeviceError, NpuBuffer, NpuDevice, NpuTask};

/// Words in one task's command list.
const TASK_WORDS: usize = 108;

/// A W8A8 `qmatmul`'s weights, tiled for the NPU.
pub struct NpuQMatMul {
    plan: TilePlan,
    /// Weight tiles in [`TilePlan::tiles`] order of (N tile, K block).
    weights: Vec<u8>,
    /// Byte offset in `weights` of each (N tile, K block).
    weight_offsets: Vec<usize>,
    /// The op's K and N, and its quantization group.
    k: usize,
    n: usize,
    group: usize,
    /// The group as the NPU sees it: zero channels pad it to a multiple of
    /// 32 (the plan's K is the groups so padded, its N is N padded with
    /// zero kernels to a multiple of 16).
    padded_group: usize,
    /// `Σ q` per group and padded column, `[K/group][N']`.
    colsums: Vec<i32>,
    /// `[K/group][N']` scales, 0 in the padding.
    scale: Vec<f32>,
}

/// The op on a device: its weights, and the buffers every run reuses
/// (feature cubes, partial outputs and command lists, sized for the
/// planned rows).
pub struct Loaded {
    weights: NpuBuffer,
    features: NpuBuffer,
    outputs: NpuBuffer,
    lists: NpuBuffer,
}

impl NpuQMatMul {
    /// `q`: row-major `[K, N]` int8 weights; `scale`: `[K/group, N]`; for
    /// `m` rows at most per call, over `cores` cores.
    pub fn new(
        q: &[i8],
        scale: &[f32],
        (m, k, n): (usize, usize, usize),
        group: usize,
        cores: u32,
    ) -> Result<NpuQMatMul, MatmulError> {
        let plan = NpuQMatMul::plan_for((m, k, n), group, cores)?;
        assert_eq!(q.len(), k * n, "weights");
        assert_eq!(scale.len(), k / group * n, "scales");
        // Zero channels at the end of each group and zero kernels at the
        // end of N (the plan's K and N): both add nothing to any sum.
        let groups = k / group;
        let (kp, np) = (plan.k as usize, plan.n as usize);
        let padded_group = kp / groups;
        let mut qp = vec![0i8; kp * np];
        for kk in 0..k {
            let row = kk / group * padded_group + kk % group;
            qp[row * np..row * np + n].copy_from_slice(&q[kk * n..(kk + 1) * n]);
        }
        let (q, k, n) = (&qp[..], kp, np);
        let kt = plan.kt as usize;
        let kb_count = k / kt;
        let mut weights = Vec::with_capacity(k * n);
        let mut weight_offsets = Vec::new();
        for n0 in (0..n).step_by(plan.nt as usize) {
            let kernels = (plan.nt as usize).min(n - n0);
            for kb in 0..kb_count {
                let block: Vec<i8> = (kb * kt..(kb + 1) * kt)
                    .flat_map(|kk| q[kk * n + n0..kk * n + n0 + kernels].iter().copied())
                    .collect();
                weight_offsets.push(weights.len());
                let packed =
                    pack_weights(&block, kt, kernels, MatmulPrecision::Int8.kernel_block());
                weights.extend(packed.iter().map(|&v| v as u8));
            }
        }
        let mut colsums = vec![0i32; groups * n];
        for kk in 0..k {
            for nn in 0..n {
                colsums[kk / padded_group * n + nn] += i32::from(q[kk * n + nn]);
            }
        }
        let n_op = scale.len() / groups;
        let mut scale_p = vec![0f32; groups * n];
        for g in 0..groups {
            scale_p[g * n..g * n + n_op].copy_from_slice(&scale[g * n_op..(g + 1) * n_op]);
        }
        Ok(NpuQMatMul {
            plan,
            weights,
            weight_offsets,
            k: groups * group,
            n: n_op,
            group,
            padded_group,
            colsums,
            scale: scale_p,
        })
    }

    /// The tile plan [`NpuQMatMul::new`] makes for a `(m, k, n)` product
    /// in groups of `group` over `cores` cores: each group padded to a
    /// multiple of 32 channels and N to a multiple of 16 kernels, and K
    /// blocks within a padded group. What the estimates time.
    pub fn plan_for(
        (m, k, n): (usize, usize, usize),
        group: usize,
        cores: u32,
    ) -> Result<TilePlan, MatmulError> {
        if group == 0 || !k.is_multiple_of(group) {
            return Err(MatmulError::GroupDivides {
                group: group as u32,
                k: k as u32,
            });
        }
        let padded_group = group.next_multiple_of(K_ALIGN as usize);
        let kp = k / group * padded_group;
        let np = n.next_multiple_of(N_ALIGN as usize);
        TilePlan::new(
            MatmulPrecision::Int8,
            (m as u32, kp as u32, np as u32),
            padded_group as u32,
            cores,
        )
    }

    pub fn plan(&self) -> &TilePlan {
        &self.plan
    }

    /// Writes the weights to `dev` and allocates the buffers of a run.
    /// For the planned rows, the feature cubes take M·K bytes (K blocks of
    /// whole 16-channel atoms), the int32 partial outputs M·N·4 per K
    /// block, and the command lists 108 words per task.
    pub fn load(&self, dev: &mut dyn NpuDevice) -> Result<Loaded, DeviceError> {
        let [w, f, o, l] = self.buffer_sizes();
        let weights = dev.alloc(w)?;
        dev.write(&weights, 0, &self.weights)?;
        Ok(Loaded {
            weights,
            features: dev.alloc(f)?,
            outputs: dev.alloc(o)?,
            lists: dev.alloc(l)?,
        })
    }

    /// Bytes of the weights, feature cubes, partial outputs and command
    /// lists.
    fn buffer_sizes(&self) -> [usize; 4] {
        let p = &self.plan;
        let (m, k, n) = (p.m as usize, p.k as usize, p.n as usize);
        [
            self.weights.len(),
            m * k,
            m * n * 4 * p.k_blocks() as usize,
            p.task_count() as usize * TASK_WORDS * WORD_BYTES,
        ]
    }

    /// NPU memory [`NpuQMatMul::load`] takes, with each buffer rounded up
    /// to `align` bytes.
    pub fn device_bytes(&self, align: usize) -> usize {
        self.buffer_sizes()
            .iter()
            .map(|b| b.next_multiple_of(align))
            .sum()
    }

    fn weight_offset(&self, tile: &Tile) -> usize {
        let tn = (tile.n0 / self.plan.nt) as usize;
        self.weight_offsets[tn * self.plan.k_blocks() as usize + tile.kb as usize]
    }

    /// `y = qmatmul(x, q, scale)` for row-major `x: [rows, K]`, rows at
    /// most the planned M.
    pub fn run(
        &self,
        dev: &mut dyn NpuDevice,
        loaded: &Loaded,
        x: &[f32],
        rows: usize,
    ) -> Result<Vec<f32>, DeviceError> {
        let p = self.plan;
        let (k, n, kt) = (p.k as usize, p.n as usize, p.kt as usize);
        assert_eq!(x.len(), rows * self.k, "activations");
        assert!(rows <= p.m as usize, "more rows than planned");
        // 1. Per-row quantization, as the reference; zeros in the padding.
        let mut params = Vec::with_capacity(rows);
        let mut xq = vec![0i8; rows * k];
        for m in 0..rows {
            let row = &x[m * self.k..(m + 1) * self.k];
            let (s, z) = activation_params(row);
            params.push((s, z as i32));
            for (kk, &v) in row.iter().enumerate() {
                let at = kk / self.group * self.padded_group + kk % self.group;
                xq[m * k + at] = quantize_activation(v, s, z) as i8;
            }
        }
        let plan = TilePlan {
            m: rows as u32,
            ..p
        };
        // 2. Feature cubes per (M tile, K block), then outputs per task.
        let c2in = p.precision.input_atom_channels();
        let c2out = p.precision.output_atom_channels();
        let mut features = Vec::new();
        let mut feature_offsets = Vec::new();
        for m0 in (0..rows).step_by(p.mt as usize) {
            let tile_rows = (p.mt as usize).min(rows - m0);
            for kb in 0..p.k_blocks() as usize {
                let block: Vec<i8> = (m0..m0 + tile_rows)
                    .flat_map(|m| xq[m * k + kb * kt..m * k + (kb + 1) * kt].iter().copied())
                    .collect();
                feature_offsets.push(features.len());
                features.extend(
                    pack_cube(&block, tile_rows, kt, c2in)
                        .iter()
                        .map(|&v| v as u8),
                );
            }
        }
        let fbuf = loaded.features;
        dev.write(&fbuf, 0, &features)?;
        let per_core = plan.tiles();
        let tiles: Vec<&Tile> = per_core.iter().flatten().collect();
        let out_len = |t: &Tile| cube_len(t.kernels as usize, t.rows as usize, c2out) * 4;
        let mut out_offsets = Vec::with_capacity(tiles.len());
        let mut out_total = 0;
        for t in &tiles {
            out_offsets.push(out_total);
            out_total += out_len(t);
        }
        let obuf = loaded.outputs;
        // 3. One command list per task, one submit per core.
        let mut lists = Vec::new();
        let mut tasks = Vec::with_capacity(tiles.len());
        for (t, &out_at) in tiles.iter().zip(&out_offsets) {
            let tm = (t.m0 / p.mt) as usize;
            let f_at = feature_offsets[tm * p.k_blocks() as usize + t.kb as usize];
            let task = plan.task(
                t,
                fbuf.addr + f_at as u32,
                loaded.weights.addr + self.weight_offset(t) as u32,
                obuf.addr + out_at as u32,
            );
            let words = task.regcmd()?;
            tasks.push(NpuTask {
                regcmd: loaded.lists.addr + lists.len() as u32,
                words: words.len() as u32,
            });
            lists.extend(encode_buffer(&words));
        }
        dev.write(&loaded.lists, 0, &lists)?;
        let mut queue = tasks.as_slice();
        for core in &per_core {
            let (now, rest) = queue.split_at(core.len());
            if !now.is_empty() {
                dev.submit(now)?;
            }
            queue = rest;
        }
        // 4. The integer sums per group (its K blocks added), corrected
        // for the zero points.
        let mut out = vec![0u8; out_total];
        dev.read(&obuf, 0, &mut out)?;
        let groups = k / self.padded_group;
        let mut acc = vec![0i64; groups * rows * n];
        for (t, &at) in tiles.iter().zip(&out_offsets) {
            let raw: Vec<i32> = out[at..at + out_len(t)]
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let (tr, tk) = (t.rows as usize, t.kernels as usize);
            let c = unpack_cube(&raw, tr, tk, c2out);
            let g = t.kb as usize * kt / self.padded_group;
            for r in 0..tr {
                let m = t.m0 as usize + r;
                for j in 0..tk {
                    acc[(g * rows + m) * n + t.n0 as usize + j] += i64::from(c[r * tk + j]);
                }
            }
        }
        for g in 0..groups {
            for (m, &(_, z)) in params.iter().enumerate() {
                let sums = &self.colsums[g * n..][..n];
                for (a, &colsum) in acc[(g * rows + m) * n..][..n].iter_mut().zip(sums) {
                    // The reference's Σ (xq - z)·q: within i32, as its sum is.
                    *a -= i64::from(z) * i64::from(colsum);
                }
            }
        }
        // 5. The scales, groups in order, as the reference, on the op's
        // N columns.
        let n_op = self.n;
        let mut y = vec![0f32; rows * n_op];
        for (m, &(s, _)) in params.iter().enumerate() {
            for g in 0..groups {
                let a = &acc[(g * rows + m) * n..][..n_op];
                let sc = &self.scale[g * n..][..n_op];
                for ((o, &a), &sc) in y[m * n_op..][..n_op].iter_mut().zip(a).zip(sc) {
                    *o += a as i32 as f32 * (s * sc);
                }
            }
        }
        Ok(y)
    }
}
