//! The pass pipelines the driver runs, public so that other tools (the
//! benchmark under `bench/`) prepare a model exactly as `slmcc compile
//! --target cpu` and `slmcc run --buckets` do.

/// The passes before bucket specialisation in the default pipeline: fold
/// the shape bookkeeping, fuse the transformer blocks, clean up. Also what
/// runs before the reference interpreter and the unplanned cpu backend.
pub const FUSION_PIPELINE: &str = "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

/// The buckets planned when none are given.
pub const DEFAULT_BUCKETS: &str = "128,256,512";

/// The default pipeline for `bucket_options` (`buckets=128,256`).
pub fn default_pipeline(bucket_options: &str) -> String {
    format!("{FUSION_PIPELINE},bucket-specialize{{{bucket_options}}},plan-memory")
}

/// The pipeline that fuses, specialises and plans a model for `buckets`
/// (`64,128`): what `slmcc run --backend cpu --buckets` and `slmcc report`
/// run.
pub fn plan_pipeline(buckets: &str) -> String {
    default_pipeline(&format!("buckets={buckets}"))
}

/// The pipeline of a model with a static KV cache (`slmcc generate`,
/// `slmcc compile --kv-cache`): fusion, `kv_pass` (a `kv-cache{...}`
/// entry), the prefill buckets `prefill` plus bucket 1 (the decode graph),
/// memory planning.
pub fn kv_cache_pipeline(kv_pass: &str, prefill: &[usize]) -> String {
    let mut sizes = prefill.to_vec();
    sizes.push(1);
    sizes.sort_unstable();
    sizes.dedup();
    let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
    format!(
        "{FUSION_PIPELINE},{kv_pass},bucket-specialize{{buckets={}}},plan-memory",
        list.join(",")
    )
}
