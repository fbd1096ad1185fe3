//! The pass pipelines the driver runs, built in one place ([`Pipeline`]),
//! public so that other tools (the benchmarks under `bench/` and
//! `compiler/examples/`) prepare a model exactly as `slmcc compile`, `run`,
//! `generate`, `golden check` and `report` do.

use std::path::PathBuf;

use slmcc_ir::Module;
use slmcc_passes::transforms::kv_cache::KvCacheOptions;
pub use slmcc_passes::transforms::quantize::QuantizeOptions;
use slmcc_passes::{PassError, PassRecord};

/// The passes before bucket specialisation in the default pipeline: fold
/// the shape bookkeeping, fuse the transformer blocks, clean up. Also what
/// runs before the reference interpreter and the unplanned cpu backend.
pub const FUSION_PIPELINE: &str =
    "decoder-inputs,shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

/// Weight quantization (`--quant`): `None` keeps the weights `f32`, else
/// the `quantize` pass runs after fusion with these options.
pub type Quant = Option<QuantizeOptions>;

/// The INT4 group when `--quant-group` is not given.
pub const DEFAULT_QUANT_GROUP: usize = 128;

/// The scheme name of a [`Quant`]: `none`, `w8a8`, `w4a8` (INT8
/// activations per token), `w8` or `w4` (weight-only: f32 activations).
pub fn quant_name(q: &Quant) -> &'static str {
    use slmcc_ir::ops::qmatmul::QActivations;
    use slmcc_passes::transforms::quantize::WeightBits;
    match q.map(|o| (o.weights, o.activations)) {
        None => "none",
        Some((WeightBits::Int8, QActivations::Int8)) => "w8a8",
        Some((WeightBits::Int4, QActivations::Int8)) => "w4a8",
        Some((WeightBits::Int8, QActivations::F32)) => "w8",
        Some((WeightBits::Int4, QActivations::F32)) => "w4",
    }
}

/// The buckets planned when none are given.
pub const DEFAULT_BUCKETS: &str = "128,256,512";

/// Which sequence-length buckets `bucket-specialize` makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketSpec {
    /// These sizes.
    Sizes(Vec<usize>),
    /// The `max` buckets that pad least for a histogram of prompt lengths.
    Profile { file: PathBuf, max: usize },
}

impl BucketSpec {
    /// The `bucket-specialize` entry.
    pub fn entry(&self) -> String {
        match self {
            BucketSpec::Sizes(s) => {
                let mut s = s.clone();
                s.sort_unstable();
                s.dedup();
                let list: Vec<String> = s.iter().map(usize::to_string).collect();
                format!("bucket-specialize{{buckets={}}}", list.join(","))
            }
            BucketSpec::Profile { file, max } => format!(
                "bucket-specialize{{profile={},max-buckets={max}}}",
                file.display()
            ),
        }
    }
}

/// A pipeline as the driver builds it: fusion, then optionally the weights
/// quantized, the user's extra passes and a static KV cache, then `widen-half` (always: it changes
/// only half-precision models), then optionally bucket specialisation,
/// weight packing, memory planning and the NPU partition, in that order. [`Pipeline::text`] is the pipeline
/// string (what `--report` and the package record), [`Pipeline::run`] runs
/// it with the verifier after every pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pipeline {
    quant: Quant,
    /// A pipeline of the user's after fusion and quantization
    /// (`--extra-passes`).
    extra: Option<String>,
    kv_cache: Option<(KvCacheOptions, bool)>,
    buckets: Option<BucketSpec>,
    plan: bool,
    partition: bool,
    pack: Option<PackTarget>,
}

/// Which quantized products `pack-weights` stores for the CPU's dot
/// products ([`Pipeline::packed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackTarget {
    /// All of them (the cpu backend runs every node).
    Cpu,
    /// Those the RK3588 placement keeps on the CPU.
    Rk3588,
}

impl Pipeline {
    /// [`FUSION_PIPELINE`] and `widen-half`.
    pub fn fusion() -> Pipeline {
        Pipeline::default()
    }

    /// The weights quantized after fusion (nothing for `None`).
    pub fn quantized(mut self, quant: Quant) -> Pipeline {
        self.quant = quant;
        self
    }

    /// The user's passes after fusion and quantization, before the KV
    /// cache, the buckets and the plan (`--extra-passes`: to see a pass's
    /// effect on the numbers `run`, `generate` and `golden check` give).
    pub fn extra_passes(mut self, pipeline: Option<&str>) -> Pipeline {
        self.extra = pipeline
            .map(str::to_string)
            .filter(|p| !p.trim().is_empty());
        self
    }

    /// A static KV cache after fusion and quantization (`kv-cache`, and
    /// `last-logits` when `last_logits`: a step computes the LM head for
    /// one row). With [`BucketSpec::Sizes`], bucket 1 (decode) joins the
    /// prefill buckets, and a `max_chunk` of 0 becomes the largest bucket.
    pub fn kv_cache(mut self, options: KvCacheOptions, last_logits: bool) -> Pipeline {
        self.kv_cache = Some((options, last_logits));
        self
    }

    /// `bucket-specialize` with these buckets.
    pub fn buckets(mut self, buckets: BucketSpec) -> Pipeline {
        self.buckets = Some(buckets);
        self
    }

    /// `plan-memory` at the end (after the buckets).
    pub fn planned(mut self) -> Pipeline {
        self.plan = true;
        self
    }

    /// `pack-weights` before the plan, when the weights are quantized: the
    /// quantized products that run on the CPU read their weights in the
    /// dot products' order, straight from the package (no repacking at
    /// load).
    pub fn packed(mut self, target: PackTarget) -> Pipeline {
        self.pack = Some(target);
        self
    }

    /// `partition{target=rk3588}` last: the NPU placement is reported
    /// (`--target rk3588`).
    pub fn partitioned(mut self) -> Pipeline {
        self.partition = true;
        self
    }

    /// The pipeline string.
    pub fn text(&self) -> String {
        let mut out = vec![FUSION_PIPELINE.to_string()];
        out.extend(self.quant.map(|q| q.entry()));
        out.extend(self.extra.clone());
        let sizes = match &self.buckets {
            Some(BucketSpec::Sizes(s)) => Some(s.clone()),
            _ => None,
        };
        if let Some((kv, last_logits)) = &self.kv_cache {
            let mut kv = kv.clone();
            if kv.max_chunk == 0 {
                if let Some(max) = sizes.as_ref().and_then(|s| s.iter().copied().max()) {
                    kv.max_chunk = max as i64;
                }
            }
            out.push(kv.entry());
            if *last_logits {
                out.push("last-logits".to_string());
            }
        }
        // Half-precision models: what the kernels compute in f32 becomes
        // explicit (nothing changes in an f32 module).
        out.push("widen-half".to_string());
        match &self.buckets {
            // The decode graph of a KV cache is bucket 1.
            Some(BucketSpec::Sizes(s)) if self.kv_cache.is_some() => {
                let with_decode: Vec<usize> = s.iter().copied().chain([1]).collect();
                out.push(BucketSpec::Sizes(with_decode).entry());
            }
            Some(b) => out.push(b.entry()),
            None => {}
        }
        match self.pack {
            Some(target) if self.quant.is_some() => out.push(format!(
                "pack-weights{{target={}}}",
                match target {
                    PackTarget::Cpu => "cpu",
                    PackTarget::Rk3588 => "rk3588",
                }
            )),
            _ => {}
        }
        if self.plan {
            out.push("plan-memory".to_string());
        }
        if self.partition {
            out.push("partition{target=rk3588}".to_string());
        }
        out.join(",")
    }

    /// Runs the pipeline on `module`, verifying after every pass.
    pub fn run(&self, module: &mut Module) -> Result<Vec<PassRecord>, PassError> {
        slmcc_passes::run_pipeline(module, &self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipelines_the_driver_runs() {
        assert_eq!(
            Pipeline::fusion().text(),
            format!("{FUSION_PIPELINE},widen-half")
        );
        let p = Pipeline::fusion()
            .quantized(Some(QuantizeOptions::int4(64)))
            .buckets(BucketSpec::Sizes(vec![256, 128]))
            .planned()
            .packed(PackTarget::Rk3588)
            .partitioned();
        assert_eq!(
            p.text(),
            format!(
                "{FUSION_PIPELINE},quantize{{weights=int4,group=64}},widen-half,\
                 bucket-specialize{{buckets=128,256}},pack-weights{{target=rk3588}},\
                 plan-memory,partition{{target=rk3588}}"
            )
        );
        // Nothing to pack without quantized weights.
        let f32 = Pipeline::fusion().packed(PackTarget::Cpu).planned();
        assert_eq!(
            f32.text(),
            format!("{FUSION_PIPELINE},widen-half,plan-memory")
        );
        let kv = Pipeline::fusion()
            .kv_cache(KvCacheOptions::default(), true)
            .buckets(BucketSpec::Sizes(vec![16, 64]))
            .planned();
        assert_eq!(
            kv.text(),
            format!(
                "{FUSION_PIPELINE},kv-cache{{max-chunk=64}},last-logits,widen-half,\
                 bucket-specialize{{buckets=1,16,64}},plan-memory"
            )
        );
        assert_eq!(quant_name(&None), "none");
        assert_eq!(quant_name(&Some(QuantizeOptions::int8())), "w8a8");
    }
}
