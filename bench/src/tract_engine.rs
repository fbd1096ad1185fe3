//! tract's side: the ONNX file loaded with `tract-onnx`, its input fixed to
//! `i64[1, len]` (the exporter's symbolic value_info and output shapes
//! ignored, tract infers them), optimised (`into_optimized`) and made
//! runnable once per prefill length; a step is one `run` of a state spawned once, on a fresh
//! copy of the ids.
//!
//! Threads: tract 0.23 runs single-threaded unless a multi-threaded executor
//! is installed; with `--threads N > 1` the benchmark installs a rayon pool
//! of N threads as tract's default executor (`tract-linalg`'s
//! `multithread-mm` feature), which its matrix products and some
//! element-wise and reduction ops use.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use std::sync::Arc;

use anyhow::{anyhow, Context};
use slmcc_ir::Tensor;
use tract_onnx::prelude::{
    tvec, DatumExt, Framework, InferenceFact, InferenceModelExt, IntoRunnable, IntoTValue, TValue,
    Tensor as TractTensor, TypedRunnableModel, TypedSimpleState,
};

/// Sets tract's thread count (see the module doc); returns how it runs.
pub fn set_threads(threads: usize) -> String {
    use tract_onnx::prelude::multithread::{set_default_executor, Executor};
    if threads <= 1 {
        set_default_executor(Executor::SingleThread);
        "tract: 1 thread".to_string()
    } else {
        set_default_executor(Executor::multithread(threads));
        format!("tract: a rayon pool of {threads} threads (multithread-mm)")
    }
}

/// One model made runnable for one length.
pub struct TractModel {
    state: TypedSimpleState,
    input: TractTensor,
    logits: Option<TValue>,
    len: usize,
}

impl TractModel {
    /// Loads and optimises `path` for `ids` (`[1, ids.len()]`). tract is a
    /// third-party library: a panic inside it is reported as an error.
    pub fn load(path: &Path, ids: &[i64]) -> anyhow::Result<TractModel> {
        let len = ids.len();
        let plan = std::panic::catch_unwind(|| -> anyhow::Result<Arc<TypedRunnableModel>> {
            // The exporter's `seq` value_info and output shapes would clash
            // with the concrete input: they are ignored, tract infers them.
            let fact: InferenceFact = i64::fact([1, len]).into();
            tract_onnx::onnx()
                .with_ignore_value_info(true)
                .with_ignore_output_shapes(true)
                .model_for_path(path)?
                .with_input_fact(0, fact)?
                .into_optimized()?
                .into_runnable()
        })
        .map_err(|_| anyhow!("tract panicked while loading the model"))?
        .with_context(|| format!("tract: {} at seq = {len}", path.display()))?;
        let state = plan.spawn().context("tract: cannot make a state")?;
        let input = TractTensor::from_shape(&[1, len], ids).context("tract: input ids")?;
        Ok(TractModel {
            state,
            input,
            logits: None,
            len,
        })
    }

    /// One prefill: what the benchmark times.
    #[inline(never)]
    pub fn run_step(&mut self) -> anyhow::Result<()> {
        let input = self.input.clone().into_tvalue();
        let state = &mut self.state;
        let out = std::panic::catch_unwind(AssertUnwindSafe(|| state.run(tvec!(input))))
            .map_err(|_| anyhow!("tract panicked while running"))?
            .context("tract: run")?;
        self.logits = out.into_iter().next();
        Ok(())
    }

    /// The logits of the last step.
    pub fn logits(&self) -> anyhow::Result<Tensor> {
        let t = self
            .logits
            .as_ref()
            .ok_or_else(|| anyhow!("tract: no step has run"))?;
        let view = t
            .to_plain_array_view::<f32>()
            .context("tract: logits are not f32")?;
        let shape = view.shape().to_vec();
        if shape.len() != 3 || shape[0] != 1 || shape[1] != self.len {
            return Err(anyhow!(
                "tract: logits have shape {shape:?}, expected [1, {}, vocab]",
                self.len
            ));
        }
        Ok(Tensor::from_f32(shape, view.iter().copied().collect()))
    }
}
