//! The pass pipelines the driver runs, public so that other tools (the
//! benchmark under `bench/`) prepare a model exactly as `slmcc compile
//! --target cpu` and `slmcc run --buckets` do.

/// The passes before bucket specialisation in the default pipeline: fold
/// the shape bookkeeping, fuse the transformer blocks, clean up. Also what
/// runs before the reference interpreter and the unplanned cpu backend.
pub const FUSION_PIPELINE: &str = "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

/// Weight quantization (`--quant`): which `quantize` entry follows fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// `f32` weights.
    None,
    /// INT8 weights per output channel, INT8 activations per token (the
    /// LM head kept f32 unless `keep_lm_head` is false).
    W8A8 { keep_lm_head: bool },
    /// INT4 weights per group of `group` rows, INT8 activations per token.
    W4A8 { group: usize, keep_lm_head: bool },
}

/// The INT4 group when `--quant-group` is not given.
pub const DEFAULT_QUANT_GROUP: usize = 128;

impl Quant {
    /// `none`, `w8a8` or `w4a8` (with the INT4 group), the LM head kept
    /// f32 or not.
    pub fn parse(name: &str, group: usize, keep_lm_head: bool) -> Result<Quant, String> {
        match name {
            "none" => Ok(Quant::None),
            "w8a8" => Ok(Quant::W8A8 { keep_lm_head }),
            "w4a8" if group > 0 => Ok(Quant::W4A8 {
                group,
                keep_lm_head,
            }),
            "w4a8" => Err("--quant-group must be positive".to_string()),
            q => Err(format!("unknown --quant `{q}` (valid: none, w8a8, w4a8)")),
        }
    }

    /// The name `parse` takes.
    pub fn name(&self) -> &'static str {
        match self {
            Quant::None => "none",
            Quant::W8A8 { .. } => "w8a8",
            Quant::W4A8 { .. } => "w4a8",
        }
    }

    /// The pass entry, if any.
    pub fn pass(&self) -> Option<String> {
        let keep = |k: bool| if k { "" } else { ",keep=none" };
        match *self {
            Quant::None => None,
            Quant::W8A8 { keep_lm_head } => {
                Some(format!("quantize{{weights=int8{}}}", keep(keep_lm_head)))
            }
            Quant::W4A8 {
                group,
                keep_lm_head,
            } => Some(format!(
                "quantize{{weights=int4,group={group}{}}}",
                keep(keep_lm_head)
            )),
        }
    }

    /// [`FUSION_PIPELINE`] followed by the quantize entry.
    pub fn fusion_pipeline(&self) -> String {
        match self.pass() {
            Some(q) => format!("{FUSION_PIPELINE},{q}"),
            None => FUSION_PIPELINE.to_string(),
        }
    }
}

/// The buckets planned when none are given.
pub const DEFAULT_BUCKETS: &str = "128,256,512";

/// The default pipeline for `bucket_options` (`buckets=128,256`).
pub fn default_pipeline(bucket_options: &str) -> String {
    quantized_pipeline(Quant::None, bucket_options)
}

/// [`default_pipeline`] with the weights quantized after fusion.
pub fn quantized_pipeline(quant: Quant, bucket_options: &str) -> String {
    format!(
        "{},bucket-specialize{{{bucket_options}}},plan-memory",
        quant.fusion_pipeline()
    )
}

/// The pipeline that fuses, specialises and plans a model for `buckets`
/// (`64,128`): what `slmcc run --backend cpu --buckets` and `slmcc report`
/// run.
pub fn plan_pipeline(buckets: &str) -> String {
    default_pipeline(&format!("buckets={buckets}"))
}

/// [`plan_pipeline`] with the weights quantized after fusion.
pub fn quantized_plan_pipeline(quant: Quant, buckets: &str) -> String {
    quantized_pipeline(quant, &format!("buckets={buckets}"))
}

/// The pipeline of a model with a static KV cache (`slmcc generate`,
/// `slmcc compile --kv-cache`): fusion, `kv_pass` (a `kv-cache{...}`
/// entry), the prefill buckets `prefill` plus bucket 1 (the decode graph),
/// memory planning.
pub fn kv_cache_pipeline(kv_pass: &str, prefill: &[usize]) -> String {
    quantized_kv_cache_pipeline(Quant::None, kv_pass, prefill)
}

/// [`kv_cache_pipeline`] with the weights quantized after fusion (before
/// the cache: the pass only rewires attention).
pub fn quantized_kv_cache_pipeline(quant: Quant, kv_pass: &str, prefill: &[usize]) -> String {
    let mut sizes = prefill.to_vec();
    sizes.push(1);
    sizes.sort_unstable();
    sizes.dedup();
    let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
    format!(
        "{},{kv_pass},bucket-specialize{{buckets={}}},plan-memory",
        quant.fusion_pipeline(),
        list.join(",")
    )
}
