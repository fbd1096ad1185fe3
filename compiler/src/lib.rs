//! `slmcc` as a library: what the driver's subcommands share.
//!
//! [`onnx`] is the ONNX frontend (`slmcc import`, and the loader of `run`,
//! `onnx-test` and `golden`); [`pipeline`] the pass pipelines `compile`,
//! `run` and `report` run; [`fusion`] what fusion made of a model
//! (`slmcc report --fusion`); [`tokenize`] the text front end of
//! `generate` and `--calib`; [`lora`] merges PEFT LoRA adapters into the
//! weights (`compile --lora`); [`unplanned`] runs a symbolic graph on the
//! cpu or simulated NPU kernels without a package.

pub mod calibrate;
pub mod fusion;
pub mod lora;
pub mod onnx;
pub mod pipeline;
pub mod tokenize;
pub mod unplanned;
