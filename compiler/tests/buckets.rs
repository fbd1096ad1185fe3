//! Bucket specialization and memory planning on the exported test models:
//! every bucket's arena is within 5% of its lower bound, and a 45-token
//! prompt run padded in the 64 and the 128 bucket gives the unpadded
//! symbolic run's outputs on the real tokens.

mod common;

use common::{repo, run_pipeline, skip, tokens, DECODERS};
use slmcc_ir::{Module, Tensor};
use slmcc_runtime::bucket::{Buckets, Padding};
use slmcc_runtime::compare::diff;
use slmcc_runtime::{run_graph, Capture};

fn import(model: &str) -> Module {
    let path = repo().join(format!("testdata/models/{model}.onnx"));
    slmcc::onnx::import_model(&path).unwrap()
}

#[test]
fn arena_is_within_five_percent_of_the_lower_bound() {
    let mut rows = Vec::new();
    for model in DECODERS {
        let mut m = import(model);
        run_pipeline(
            &mut m,
            "const-fold,dce,bucket-specialize{buckets=64,128},plan-memory",
        );
        assert_eq!(m.plans.len(), 2, "{model}");
        for (graph, plan) in &m.plans {
            plan.check().unwrap();
            let ratio = plan.ratio();
            rows.push(format!(
                "{model:<6} {graph:<9} arena {:>8}  lower bound {:>8}  ratio {ratio:.4}",
                plan.regions.arena, plan.lower_bound
            ));
            assert!(
                plan.regions.arena as f64 <= 1.05 * plan.lower_bound as f64,
                "{model} @{graph}: arena {} > 1.05 x lower bound {}",
                plan.regions.arena,
                plan.lower_bound
            );
        }
    }
    eprintln!("{}", rows.join("\n"));
}

/// Runs `model` on 45 tokens unpadded (symbolic graph) and padded in
/// `bucket`, and compares the outputs on the real tokens.
fn padded_equals_unpadded(model: &str, bucket: usize) {
    let mut symbolic = import(model);
    run_pipeline(&mut symbolic, "const-fold,dce");
    let mut bucketed = symbolic.clone();
    run_pipeline(
        &mut bucketed,
        &format!("bucket-specialize{{buckets={bucket}}},plan-memory"),
    );
    let ids = Tensor::from_i64(vec![1, 45], tokens(45, 512, 0x5eed));
    let inputs = vec![("input_ids".to_string(), ids)];
    let reference = run_graph(&symbolic, &symbolic.graphs[0], &inputs, &Capture::Nothing).unwrap();
    let run = Buckets::new(&bucketed, "main")
        .unwrap()
        .run(&inputs, Padding { pad_id: 0 })
        .unwrap();
    assert_eq!((run.bucket, run.length), (bucket, 45));
    for ((name, got), (_, want)) in run.result.outputs.iter().zip(&reference.outputs) {
        let d = diff(got, want).unwrap();
        assert!(
            d.max_rel < 1e-5 && d.mismatched_specials == 0,
            "{model} bucket {bucket}, output {name}: {d:?}"
        );
    }
}

#[test]
fn padded_runs_match_unpadded_in_bucket_64() {
    for model in DECODERS {
        padded_equals_unpadded(model, 64);
    }
}

#[test]
fn padded_runs_match_unpadded_in_bucket_128() {
    for model in DECODERS {
        padded_equals_unpadded(model, 128);
    }
}

/// An encoder attends both ways, so padding is exact only because the
/// padded `attention_mask` positions are 0 (masked keys).
#[test]
fn padded_encoder_matches_unpadded_with_attention_mask() {
    let path = repo().join("testdata/generated/minilm.onnx");
    if !path.exists() {
        // Assembled on demand by testdata/models/minilm.py (scripts/test does it).
        skip(
            "padded MiniLM bucket",
            &format!("{} is absent (scripts/test assembles it)", path.display()),
        );
        return;
    }
    let mut symbolic = slmcc::onnx::import_model(&path).unwrap();
    run_pipeline(&mut symbolic, "const-fold,dce");
    let mut bucketed = symbolic.clone();
    run_pipeline(&mut bucketed, "bucket-specialize{buckets=64}");
    let n = 45;
    let mut ids = tokens(n, 30522, 0x5eed);
    ids[0] = 101; // [CLS]
    ids[n - 1] = 102; // [SEP]
    let inputs = vec![
        ("input_ids".to_string(), Tensor::from_i64(vec![1, n], ids)),
        (
            "attention_mask".to_string(),
            Tensor::from_i64(vec![1, n], vec![1; n]),
        ),
        (
            "token_type_ids".to_string(),
            Tensor::from_i64(vec![1, n], vec![0; n]),
        ),
    ];
    let reference = run_graph(&symbolic, &symbolic.graphs[0], &inputs, &Capture::Nothing).unwrap();
    let run = Buckets::new(&bucketed, "main")
        .unwrap()
        .run(&inputs, Padding { pad_id: 0 })
        .unwrap();
    assert_eq!(run.bucket, 64);
    for ((name, got), (_, want)) in run.result.outputs.iter().zip(&reference.outputs) {
        let d = diff(got, want).unwrap();
        assert!(d.max_rel < 1e-5, "minilm output {name}: {d:?}");
    }
}
