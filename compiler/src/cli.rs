//! The command-line interface, as fixed by the design: `import`, `opt`,
//! `compile`, `run`, `onnx-test`, `golden`, `report`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use slmcc::pipeline::{Quant, QuantizeOptions, FUSION_PIPELINE};
use slmcc_passes::transforms::kv_cache::KvCacheOptions;
use slmcc_passes::transforms::quantize::smooth::Smooth;
use slmcc_passes::transforms::quantize::Method;

/// `--target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The host or board CPU only.
    Cpu,
    /// The RK3588: the W8A8 linear layers on its NPU as register
    /// programs (docs/NPU.md), the rest on its CPU cores.
    Rk3588,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Cpu => "cpu",
            Target::Rk3588 => "rk3588",
        })
    }
}

impl Target {
    /// The quantization when `--quant` is not given: the NPU computes in
    /// INT8, so `w8a8` for rk3588; `none` for the CPU.
    pub fn default_quant(self) -> QuantScheme {
        match self {
            Target::Cpu => QuantScheme::None,
            Target::Rk3588 => QuantScheme::W8a8,
        }
    }

    /// The CPU the kernels are for when `--cpu` is not given: the board's
    /// for rk3588, the host's for cpu.
    pub fn default_cpu(self) -> CpuArg {
        match self {
            Target::Cpu => CpuArg::Host,
            Target::Rk3588 => CpuArg::Aarch64,
        }
    }
}

/// `--backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The reference interpreter.
    Reference,
    /// The Cranelift CPU backend, JIT-compiled for the host.
    Cpu,
    /// The RK3588's NPU as its functional model: the W8A8 qmatmuls
    /// through the register interface the board's driver takes
    /// (docs/NPU.md), bit-exact; the rest on cpu.
    NpuSim,
    /// As npu-sim, on the board's NPU through the mainline `rocket`
    /// driver (/dev/accel) or the vendor `rknpu` one (/dev/dri); on cpu
    /// when there is none or a task fails, said once.
    Npu,
}

impl BackendArg {
    /// The name on the command line (`npu-sim`), which also keys the
    /// golden manifests' tolerances.
    pub fn name(self) -> &'static str {
        match self {
            BackendArg::Reference => "reference",
            BackendArg::Cpu => "cpu",
            BackendArg::NpuSim => "npu-sim",
            BackendArg::Npu => "npu",
        }
    }
}

/// `--cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CpuArg {
    /// The host: the runtime JIT-compiles the kernels at load.
    Host,
    /// The board's A76 cores: an aarch64 object per bucket in the package.
    Aarch64,
}

/// `--quant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuantScheme {
    /// f32 weights.
    None,
    /// INT8 weights per output channel, INT8 activations per token.
    W8a8,
    /// INT4 weights per group, INT8 activations per token.
    W4a8,
    /// Weight-only: INT8 weights per output channel, f32 activations (the
    /// CPU; the NPU multiplies INT8 activations).
    W8,
    /// Weight-only: INT4 weights per group, f32 activations (the CPU).
    W4,
}

/// `--quant-keep`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuantKeep {
    /// The LM head (the matmul producing the logits) stays f32.
    LmHead,
    /// Every linear layer is quantized.
    None,
}

/// `--kv-dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvDtype {
    F32,
    F16,
    /// INT8 per head and token, each row with its own scale.
    I8,
}

/// `--prefill-logits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrefillLogits {
    /// The chunk's last token only: the LM head multiplies one row.
    Last,
    /// Every row.
    All,
}

/// `--threads`, shared by the commands that run kernels.
#[derive(Args, Debug, Clone, Copy)]
pub struct ThreadsArgs {
    /// Threads for the cpu kernels' matrix products (the host GEMM and the
    /// quantized products split large ones, in a package's objects too);
    /// other kernels run on one thread.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=slmcc_backends::cpu::MAX_THREADS as i64))]
    pub threads: u16,
    /// Run the process's threads only on these cores (`4-7`, `0,2`): on the
    /// RK3588 the Cortex-A76 cores are 4-7.
    #[arg(long, value_name = "CORES", value_parser = crate::commands::pin::Cores::parse)]
    pub pin_cores: Option<crate::commands::pin::Cores>,
}

impl ThreadsArgs {
    /// Applies `--pin-cores`, if given (before any kernel or worker thread
    /// exists).
    pub fn pin(&self) -> anyhow::Result<()> {
        self.pin_cores.map_or(Ok(()), |c| c.pin())
    }

    /// The cpu backend's default options with this thread count.
    pub fn cpu_options(&self) -> slmcc_backends::cpu::CpuOptions {
        slmcc_backends::cpu::CpuOptions {
            threads: self.threads.into(),
            ..Default::default()
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "slmcc",
    version,
    about = "A graph compiler for small language models on edge NPUs (RK3588 and kin)"
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace); SLMCC_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Import an ONNX model and print (or write) its textual IR.
    Import(ImportArgs),
    /// Run a pass pipeline over textual IR.
    #[command(after_long_help = opt_after_help())]
    Opt(OptArgs),
    /// Compile an ONNX model into a deployable package for a target.
    #[command(after_long_help = compile_after_help())]
    Compile(CompileArgs),
    /// Run a model or package on inputs and write its outputs.
    #[command(after_long_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Generate tokens with a KV cache: prefill the prompt, then decode.
    #[command(after_long_help = GENERATE_AFTER_HELP)]
    Generate(GenerateArgs),
    /// Run ONNX backend-test directories and report pass/fail per test.
    OnnxTest(OnnxTestArgs),
    /// Record or check per-layer golden tensors.
    Golden(GoldenArgs),
    /// Print what a package contains: buckets, kernels, memory plan, estimates.
    #[command(after_long_help = REPORT_AFTER_HELP)]
    Report(ReportArgs),
    /// List the registered passes: contract, phases, options with defaults, statistics.
    Passes(PassesArgs),
    /// The RK3588 NPU's register interface: print or decode register command lists.
    #[command(after_long_help = NPU_AFTER_HELP)]
    Npu(NpuArgs),
    /// Measure a model's quality: perplexity on a text.
    #[command(after_long_help = EVAL_AFTER_HELP)]
    Eval(EvalArgs),
    /// Make an Ed25519 key pair for signing packages (compile --sign KEY)
    /// and checking them (run/generate --trust PUBKEY).
    #[command(after_long_help = KEYGEN_AFTER_HELP)]
    Keygen(KeygenArgs),
    /// Write the update that turns package OLD into package NEW: the
    /// weight sections that changed, as bytes xored with OLD's, zstd.
    #[command(after_long_help = DELTA_AFTER_HELP)]
    Delta(DeltaArgs),
    /// Rebuild package NEW from OLD and an update made by `slmcc delta`,
    /// byte for byte, verified before it replaces anything.
    #[command(after_long_help = DELTA_AFTER_HELP)]
    Patch(PatchArgs),
}

const DELTA_AFTER_HELP: &str = "\
Update:
  The weights are compared section by section (1 MiB, the sections whose
  digests the manifest holds): a section of NEW that OLD has anywhere is
  copied from OLD; a changed one is stored xored with OLD's section of the
  same index (a fine-tune or a requantization keeps the layout, so most of
  its bytes xor to zero); the header and manifest are xored with OLD's, a
  signature stored as it is; then the whole is compressed with zstd. The
  update names OLD's and NEW's SHA-256.

Patch:
  Refuses an OLD other than the one the update was made from, then writes
  NEW to a temporary file beside -o, checks its SHA-256, opens it as a
  package (every digest, and the signature if signed; with --trust, the
  signer) and only then renames it to -o, which may be OLD itself.

Example:
  slmcc delta v1.slmpkg v2.slmpkg -o v1-to-v2.slmdelta
  slmcc patch v1.slmpkg v1-to-v2.slmdelta -o v2.slmpkg --trust release.pub";

#[derive(Args, Debug)]
pub struct DeltaArgs {
    /// The package the device has.
    pub old: PathBuf,
    /// The package to send.
    pub new: PathBuf,
    /// The update to write.
    #[arg(short, long, value_name = "UPDATE.slmdelta")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct PatchArgs {
    /// The package the update was made from.
    pub old: PathBuf,
    /// The update (`slmcc delta`).
    pub delta: PathBuf,
    /// The package to write (may be OLD).
    #[arg(short, long, value_name = "NEW.slmpkg")]
    pub output: PathBuf,
    /// Refuse the result unless this Ed25519 public key signed it.
    #[arg(long, value_name = "KEY.pub")]
    pub trust: Option<PathBuf>,
}

const KEYGEN_AFTER_HELP: &str = "\
Files:
  NAME.key  the private key: PKCS#8 PEM, created with mode 0600
  NAME.pub  the public key: SubjectPublicKeyInfo PEM
  They are the formats openssl writes, so a key made by
  `openssl genpkey -algorithm ed25519 -out NAME.key` and
  `openssl pkey -in NAME.key -pubout -out NAME.pub` works as well.
  Neither file may exist already.

Signing:
  compile --sign NAME.key signs the package's header, which holds the
  SHA-256 of the manifest and of the weights; run and generate
  --trust NAME.pub refuse a package that is unsigned, whose signature does
  not verify, or that another key signed. report PKG names the signer.

Example:
  slmcc keygen release
  slmcc compile testdata/models/qwen2.onnx --target cpu --sign release.key \\
    -o qwen2.slmpkg
  slmcc run qwen2.slmpkg --trust release.pub \\
    --input input_ids=goldens/qwen2/seq11/input_ids.npy";

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// The key pair's name: writes NAME.key and NAME.pub.
    pub name: PathBuf,
}

const EVAL_AFTER_HELP: &str = "\
Perplexity: the token ids (the text encoded whole by the tokenizer, or the
ids given) are cut into consecutive windows of --window tokens, the last
partial window dropped; each window runs as one input, and every token after
its first is predicted from the ones before it in the window. Perplexity is
exp of the mean negative log-likelihood over those tokens (in f64).

Example (the trained test decoder, FP32 and W4A8):
  slmcc eval ppl testdata/models/trained/llama_trained.onnx \\
    --text testdata/models/trained/heldout.txt --tokenizer testdata/models/trained/tokenizer.json
  slmcc eval ppl testdata/models/trained/llama_trained.onnx --quant w4a8 --backend cpu \\
    --ids ids.npy";

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub action: EvalAction,
}

#[derive(Subcommand, Debug)]
pub enum EvalAction {
    /// Perplexity of a causal language model (input `input_ids`, logits
    /// over the vocabulary as its first output) on a text or token ids.
    Ppl(EvalPplArgs),
}

#[derive(Args, Debug)]
pub struct EvalPplArgs {
    /// An ONNX model or textual IR (`.slm`). Packages keep only the last
    /// token's logits, so they are not evaluated: evaluate the model they
    /// were compiled from, with the same --quant.
    pub model: PathBuf,
    /// The text to measure on, encoded whole with --tokenizer.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tokenizer",
        conflicts_with = "ids"
    )]
    pub text: Option<PathBuf>,
    /// A Hugging Face `tokenizer.json` for --text.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Token ids instead of a text: an int64 (or int32) `.npy` of any shape,
    /// read in order.
    #[arg(long, value_name = "FILE.npy", required_unless_present = "text")]
    pub ids: Option<PathBuf>,
    /// Tokens per window.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(2..))]
    pub window: u32,
    /// Measure on the first N tokens only (a quick check).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<usize>,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    #[command(flatten)]
    pub threads: ThreadsArgs,
    /// Quantize the model first (`quantize` after fusion), as `compile` does.
    #[command(flatten)]
    pub quant: QuantArgs,
    /// Score through a static KV cache of this element type (the kv-cache
    /// pass, one window per step from position 0): what a cache's rounding
    /// costs. Without it, the model runs with no cache.
    #[arg(long, value_enum)]
    pub kv_dtype: Option<KvDtype>,
}

const NPU_AFTER_HELP: &str = "\
Each line is one 64-bit command word: target block, register address and value
in hex (4, 4 and 8 digits), then the register's name and its non-zero fields.
Targets: 0101 PC, 0201 CNA, 0801 CORE, 1001 DPU, 2001 DPU_RDMA; 0041 and 0081
are the two words that end a task (the second enables the blocks).

Examples:
  slmcc npu regcmd --dtype int8 --m 4 --k 32 --n 16
  slmcc npu regcmd --dtype fp16 --out-dtype fp16 --m 32 --k 512 --n 64 -o task.bin
  slmcc npu disasm task.bin
  slmcc npu plan --dtype int8 --m 64 --k 1536 --n 8960";

#[derive(Args, Debug)]
pub struct NpuArgs {
    #[command(subcommand)]
    pub action: NpuAction,
}

#[derive(Subcommand, Debug)]
pub enum NpuAction {
    /// Print the register command list of one single-task matmul (inputs M x K, weights K x N).
    Regcmd(RegcmdArgs),
    /// Decode a register command buffer (little-endian 64-bit words), one line per word.
    Disasm(DisasmArgs),
    /// How a matmul splits into single tasks over the cores, and its estimated time.
    Plan(NpuPlanArgs),
}

/// The matmul of `slmcc npu regcmd` and `npu plan`: inputs M x K, weights K x N.
#[derive(Args, Debug)]
pub struct NpuMatmulArgs {
    /// Input precision (int8 x int8 accumulates in int32, fp16 x fp16 in fp32).
    #[arg(long, value_enum)]
    pub dtype: NpuDtype,
    /// Output precision [default: int32 for int8, fp32 for fp16; fp16 also for fp16].
    #[arg(long, value_enum)]
    pub out_dtype: Option<NpuOutDtype>,
    /// Rows of the input (M x K).
    #[arg(long)]
    pub m: u32,
    /// Inner dimension (a multiple of 32).
    #[arg(long)]
    pub k: u32,
    /// Columns of the weights (K x N; a multiple of 16).
    #[arg(long)]
    pub n: u32,
}

#[derive(Args, Debug)]
pub struct NpuPlanArgs {
    #[command(flatten)]
    pub matmul: NpuMatmulArgs,
    /// The quantization group, whose partial sums the host adds [default: K].
    #[arg(long)]
    pub group: Option<u32>,
}

/// Input precision of an NPU matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NpuDtype {
    Int8,
    Fp16,
}

/// Output precision of an NPU matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NpuOutDtype {
    Int32,
    Fp32,
    Fp16,
}

#[derive(Args, Debug)]
pub struct RegcmdArgs {
    #[command(flatten)]
    pub matmul: NpuMatmulArgs,
    /// NPU address of the input buffer (decimal or 0x hex).
    #[arg(long, default_value = "0", value_parser = parse_u32_address)]
    pub input_addr: u32,
    /// NPU address of the weight buffer.
    #[arg(long, default_value = "0", value_parser = parse_u32_address)]
    pub weights_addr: u32,
    /// NPU address of the output buffer.
    #[arg(long, default_value = "0", value_parser = parse_u32_address)]
    pub output_addr: u32,
    /// Also write the command buffer (little-endian 64-bit words) to this file.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DisasmArgs {
    /// A register command buffer: little-endian 64-bit words.
    pub input: PathBuf,
}

/// A 32-bit NPU address, decimal or `0x` hex.
fn parse_u32_address(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    };
    parsed.map_err(|e| format!("`{s}` is not a 32-bit address: {e}"))
}

fn opt_after_help() -> String {
    format!(
        "Passes:\n{}\nExample:\n  slmcc opt model.slm --passes shape-infer,const-fold,dce,cse --verify-each",
        slmcc_passes::registry::describe_passes()
    )
}

#[derive(Args, Debug)]
pub struct PassesArgs {
    /// Print the Markdown table that `docs/ARCHITECTURE.md` holds.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The ONNX model.
    pub model: PathBuf,
    /// Write the IR here instead of stdout (`-`: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct OptArgs {
    /// The textual IR to transform (`.slm`).
    pub input: PathBuf,
    /// The pipeline, e.g. `shape-infer,const-fold{max-elements=64},dce`.
    #[arg(long, default_value = "")]
    pub passes: String,
    /// Print the IR after `all` passes, after those that `change` it, or after the named passes.
    #[arg(long, value_name = "all|change|NAME")]
    pub print_ir_after: Option<String>,
    /// Run the verifier after every pass.
    #[arg(long)]
    pub verify_each: bool,
    /// Print per-pass time and statistics on stderr.
    #[arg(long)]
    pub pass_stats: bool,
    /// Run only the first N passes (to find which pass breaks a model).
    #[arg(long, value_name = "N")]
    pub bisect_limit: Option<usize>,
    /// Print the IR before the named passes (comma-separated).
    #[arg(long, value_name = "NAME,...")]
    pub print_ir_before: Option<String>,
    /// Print the IR as a failing pass left it.
    #[arg(long)]
    pub print_ir_after_failure: bool,
    /// When a pass fails, write the IR before it to FILE, with the error
    /// and the pipeline that replays it (`slmcc opt FILE --passes PASS`)
    /// as comments at its top.
    #[arg(long, value_name = "FILE")]
    pub reproducer: Option<PathBuf>,
    /// Write the result here instead of stdout (`-`: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The model: ONNX (`.onnx`), or textual IR (`.slm`, with its weights file).
    pub model: PathBuf,
    /// The target.
    #[arg(long, value_enum)]
    pub target: Target,
    /// The package to write [default: MODEL's file stem + `.slmpkg`, in the
    /// current directory].
    #[arg(short, long, value_name = "OUT.slmpkg")]
    pub output: Option<PathBuf>,
    /// Sequence-length buckets [default: 128,256,512].
    #[arg(long, value_name = "N,N,...", conflicts_with = "bucket_profile")]
    pub buckets: Option<String>,
    /// Choose the buckets from a histogram of prompt lengths (lines
    /// `LENGTH [COUNT]`) instead.
    #[arg(long, value_name = "FILE")]
    pub bucket_profile: Option<PathBuf>,
    /// With --bucket-profile: how many buckets to choose [default: 3].
    #[arg(long, value_name = "K", requires = "bucket_profile")]
    pub max_buckets: Option<usize>,
    /// Merge this PEFT LoRA adapter (a folder with adapter_config.json and
    /// adapter_model.safetensors) into the weights before any pass, with
    /// WEIGHT (default 1) scaling its update; repeat to merge several.
    /// Modules are matched by the exporter's scopes, and an adapter that
    /// does not fit the model is refused, naming the module.
    #[arg(long, value_name = "DIR[:WEIGHT]")]
    pub lora: Vec<String>,
    #[command(flatten)]
    pub quant: QuantArgs,
    /// The pass pipeline, replacing the default (see below).
    #[arg(long, value_name = "PIPELINE")]
    pub passes: Option<String>,
    /// Also write a JSON report: per bucket the fused-op counts, arena bytes
    /// and lower bound; per pass the time and statistics.
    #[arg(long, value_name = "OUT.json")]
    pub report: Option<PathBuf>,
    /// The CPU the kernels are for: `host` (the runtime JIT-compiles them
    /// from the IR at load; the package carries none) or `aarch64` (the
    /// package also carries an aarch64 ELF object per bucket for the board)
    /// [default: aarch64 for --target rk3588, host otherwise].
    #[arg(long, value_enum)]
    pub cpu: Option<CpuArg>,
    /// Give the model a static KV cache for `slmcc generate`: the kv-cache
    /// pass runs after fusion, and bucket 1 (the decode graph) joins the
    /// prefill buckets.
    #[arg(long)]
    pub kv_cache: bool,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Sign the package with this Ed25519 private key (PKCS#8 PEM, from
    /// `slmcc keygen` or openssl).
    #[arg(long, value_name = "KEY.key")]
    pub sign: Option<PathBuf>,
    /// Encrypt the weights with this AES-256 key (32 bytes, or 64 hex
    /// digits: `openssl rand -hex 32 > KEYFILE`), AES-256-GCM in 1 MiB
    /// chunks; run and generate then need --decrypt KEYFILE.
    #[arg(long, value_name = "KEYFILE")]
    pub encrypt: Option<PathBuf>,
    /// Measure perplexity on this text (with --eval-tokenizer) or these
    /// token ids (`.npy`), of the model quantized as the package is and of
    /// the float model, and record both in the model card (`slmcc eval
    /// ppl`'s protocol on the cpu backend).
    #[arg(long, value_name = "TEXT|IDS.npy")]
    pub eval: Option<PathBuf>,
    /// The tokenizer.json that encodes an --eval text.
    #[arg(long, value_name = "FILE", requires = "eval")]
    pub eval_tokenizer: Option<PathBuf>,
    /// Tokens per --eval window.
    #[arg(long, value_name = "N", default_value_t = 128, requires = "eval",
          value_parser = clap::value_parser!(u32).range(2..))]
    pub eval_window: u32,
    /// --eval on the first N tokens only.
    #[arg(long, value_name = "N", requires = "eval")]
    pub eval_max_tokens: Option<usize>,
}

/// `compile --help`'s text after the options, with the fusion pipeline
/// as [`FUSION_PIPELINE`] spells it.
fn compile_after_help() -> String {
    COMPILE_AFTER_HELP.replace("{fusion}", FUSION_PIPELINE)
}

const COMPILE_AFTER_HELP: &str = "\
Pipeline:
  By default
    {fusion},
    widen-half,bucket-specialize{buckets=B},plan-memory
  where B is --buckets (default 128,256,512), or profile=FILE,max-buckets=K
  from --bucket-profile.
  --passes replaces it; bucket-specialize{...} is appended when the pipeline
  does not run it, and plan-memory when it does not end with it, so that
  every graph of the package is a planned bucket. Every node must then lower
  on the cpu backend: the first one that does not is named and nothing is
  written.

LoRA:
  --lora DIR[:WEIGHT] merges a PEFT adapter as merge_and_unload does:
  W += WEIGHT * (lora_alpha / r) * B.A per adapted linear layer (alpha/sqrt(r)
  with use_rslora; rank_pattern and alpha_pattern apply), in f32, before
  quantization. Linear layers are found by graph structure and named by the
  exporter's scope metadata (dynamo) or node names (TorchScript, Optimum),
  so weights named val_N or stored transposed are matched. DoRA, LoRA on
  embeddings, trained biases and modules_to_save are refused. The model
  card records each adapter's digest, rank, alpha and weight.

Package:
  A header (magic, format version, section lengths, the SHA-256 of the
  manifest and of the weights), a protobuf manifest (version set, options,
  one entry per bucket: the graph and its memory plan as textual IR, plus an
  aarch64 object with --cpu aarch64), and the weights (safetensors layout,
  64-byte aligned). Same model and options give the same bytes. slmcc run
  PKG and slmcc report PKG load it, verifying everything.
  The manifest also holds the model card (report PKG --card; with --eval
  it records the measured perplexity).
  With --sign KEY a 96-byte trailer follows: the Ed25519 public key and its
  signature over the header (which names both digests); run and generate
  --trust PUBKEY then refuse any package that key did not sign.
  With --encrypt KEYFILE the weights (and the NPU weights' column sums) are
  AES-256-GCM encrypted in 1 MiB chunks, each chunk's nonce and tag in the
  manifest; the digests cover the ciphertext, so the package verifies
  without the key, and run and generate --decrypt KEYFILE decrypt it into
  memory chunk by chunk, refusing a wrong key or a changed chunk.

Example:
  slmcc compile testdata/models/llama.onnx --target cpu --buckets 64,128 \\
    -o llama.slmpkg --report llama.json";

/// The keys a package is loaded with (`run`, `generate`).
#[derive(Args, Debug, Default)]
pub struct PackageKeys {
    /// Refuse the package unless this Ed25519 public key (PEM, from
    /// `slmcc keygen`) signed it (`compile --sign`).
    #[arg(long, value_name = "KEY.pub")]
    pub trust: Option<PathBuf>,
    /// Decrypt the package's weights with this AES-256 key (`compile
    /// --encrypt`): 32 bytes, or 64 hex digits.
    #[arg(long, value_name = "KEYFILE")]
    pub decrypt: Option<PathBuf>,
    /// Run a package even when this slmcc would compile other cpu kernels
    /// for it than the ones it was compiled with (its kernel fingerprints
    /// differ: its numbers may differ from those it was checked with).
    #[arg(long)]
    pub allow_kernel_change: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// An ONNX model, textual IR (`.slm`, with its weights file), or a
    /// package (`.slmpkg`, from `slmcc compile`).
    pub model: PathBuf,
    #[command(flatten)]
    pub keys: PackageKeys,
    /// Where to run [default: reference; for a package its target: cpu,
    /// or npu-sim for rk3588].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Quantize the model's weights first (not for packages).
    #[command(flatten)]
    pub quant: QuantArgs,
    /// An input as NAME=FILE.npy or NAME=FILE.pb (ONNX TensorProto); repeat per input.
    #[arg(long, value_name = "NAME=FILE")]
    pub input: Vec<String>,
    /// Write each output as NAME.npy here (otherwise print a summary).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Sequence-length buckets, e.g. 64,128: specialise (and on cpu,
    /// memory-plan) the model for each and run the input padded in the
    /// smallest that holds it.
    #[arg(long, value_name = "N,N,...")]
    pub buckets: Option<String>,
    /// Time every kernel call and print on stderr, at the end: time and
    /// bytes moved per op kind, the slowest nodes, and peak memory (the
    /// planned executor: a package, or --buckets, on cpu or npu-sim).
    #[arg(long)]
    pub profile: bool,
    /// Passes of your own to run after fusion and quantization, before the
    /// buckets (a pipeline, as `opt --passes` takes): to see their effect
    /// on the numbers. Models only; a package's passes ran at compile time.
    #[arg(long, value_name = "PIPELINE")]
    pub extra_passes: Option<String>,
    #[command(flatten)]
    pub threads: ThreadsArgs,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// A decoder: an ONNX model (input_ids -> logits) or a package compiled
    /// with --kv-cache.
    pub model: PathBuf,
    #[command(flatten)]
    pub keys: PackageKeys,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_name = "ID,ID,...", conflicts_with = "prompt")]
    pub prompt_ids: Option<String>,
    /// Prompt text, encoded with --tokenizer.
    #[arg(long, requires = "tokenizer")]
    pub prompt: Option<String>,
    /// A Hugging Face tokenizer.json, for --prompt and to print text.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// How many tokens to generate at most.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Stop after generating this token (repeatable).
    #[arg(long = "stop-token", value_name = "ID")]
    pub stop_tokens: Vec<i64>,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Sample among the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probability reaches P.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to run [default: cpu; npu-sim for an rk3588 package].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Quantize the model's weights first (not for packages).
    #[command(flatten)]
    pub quant: QuantArgs,
    #[command(flatten)]
    pub threads: ThreadsArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Prefill buckets (an ONNX model only; bucket 1, the decode graph, is always added).
    #[arg(long, value_name = "N,N,...", default_value = "16,64")]
    pub buckets: String,
    /// Write the logits of every generated token as LOGITS.npy ([steps, vocab]).
    #[arg(long, value_name = "FILE")]
    pub logits_out: Option<PathBuf>,
    /// Print only the generated ids, one line at the end (no streaming, no timing).
    #[arg(long)]
    pub quiet: bool,
    /// Time every kernel call and print on stderr, at the end: time and
    /// bytes moved per op kind, the slowest nodes, prefill and decode
    /// tokens/s, and peak memory (cpu and npu-sim backends).
    #[arg(long)]
    pub profile: bool,
    /// Passes of your own to run after fusion and quantization, before the
    /// KV cache and the buckets (a pipeline, as `opt --passes` takes): to
    /// see their effect on the tokens. Models only; a package's passes ran
    /// at compile time.
    #[arg(long, value_name = "PIPELINE")]
    pub extra_passes: Option<String>,
}

/// Weight quantization: the `quantize` pass after fusion.
#[derive(Args, Debug, Clone)]
pub struct QuantArgs {
    /// The weights' quantization; activations INT8 per token (`w8a8`,
    /// `w4a8`) or f32 (weight-only `w8`, `w4`: CPU only). The LM head, the
    /// embedding, norms and residual adds stay f32 [default: w8a8 for
    /// --target rk3588, none otherwise].
    #[arg(long, value_enum)]
    pub quant: Option<QuantScheme>,
    /// With `w4a8` and `w4`: rows of K sharing one scale (narrowed to a divisor of
    /// K where it does not divide it).
    #[arg(long, value_name = "G", default_value_t = slmcc::pipeline::DEFAULT_QUANT_GROUP)]
    pub quant_group: usize,
    /// Linear layers kept f32 (`none`: quantize the LM head too, as
    /// deployments short of memory do).
    #[arg(long, value_enum, default_value_t = QuantKeep::LmHead)]
    pub quant_keep: QuantKeep,
    /// How the weights are rounded: rtn (to nearest); gptq (each layer's
    /// rounding error moved onto the weights not yet rounded, by the
    /// calibration activations' Hessian); smoothquant (the activations'
    /// per-channel ranges moved into the weights, for w8a8); awq (scales
    /// per input channel searched for the least output error, for 4-bit
    /// weights). All but rtn need --calib.
    #[arg(long, value_enum, default_value_t = QuantMethod::Rtn)]
    pub quant_method: QuantMethod,
    /// Mixed precision: the most sensitive products (by the calibration
    /// Hessian with --calib, else by weight error) stay at higher precision
    /// (4-bit weights at 8 bits, 8-bit ones in f32) within P% more bytes
    /// than the quantized weights take.
    #[arg(long, value_name = "P", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub quant_fallback: u8,
    /// SmoothQuant's migration strength alpha, in 0..=1.
    #[arg(long, value_name = "A", default_value_t = 0.5)]
    pub smooth_alpha: f64,
    /// Calibration samples for --quant-method gptq|smoothquant|awq: token ids (`.npy`, any
    /// shape, read in order) or a text (any other file, with
    /// --calib-tokenizer), cut into windows of --calib-window tokens.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<PathBuf>,
    /// The tokenizer.json that encodes a --calib text.
    #[arg(long, value_name = "FILE")]
    pub calib_tokenizer: Option<PathBuf>,
    /// Tokens per calibration window.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub calib_window: usize,
    /// Calibration windows used at most (the first ones).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub calib_windows: usize,
}

/// `--quant-method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuantMethod {
    Rtn,
    Gptq,
    Smoothquant,
    Awq,
}

impl QuantArgs {
    /// `--quant-method` as written on the command line.
    pub fn quant_method_name(&self) -> String {
        self.quant_method
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string())
    }

    /// The choice; `default` when `--quant` is not given.
    pub fn get(&self, default: QuantScheme) -> anyhow::Result<Quant> {
        let keep_lm_head = self.quant_keep == QuantKeep::LmHead;
        let options = match self.quant.unwrap_or(default) {
            QuantScheme::None => return Ok(None),
            QuantScheme::W8a8 => QuantizeOptions::int8(),
            QuantScheme::W8 => QuantizeOptions::int8().weight_only(),
            QuantScheme::W4a8 | QuantScheme::W4 if self.quant_group == 0 => {
                anyhow::bail!("--quant-group must be positive")
            }
            QuantScheme::W4a8 => QuantizeOptions::int4(self.quant_group),
            QuantScheme::W4 => QuantizeOptions::int4(self.quant_group).weight_only(),
        };
        if !(0.0..=1.0).contains(&self.smooth_alpha) {
            anyhow::bail!("--smooth-alpha must be in 0..=1, not {}", self.smooth_alpha);
        }
        let options = QuantizeOptions {
            method: match self.quant_method {
                QuantMethod::Gptq => Method::Gptq,
                _ => Method::Rtn,
            },
            smooth: match self.quant_method {
                QuantMethod::Smoothquant => Some(Smooth::SmoothQuant {
                    alpha_percent: (self.smooth_alpha * 100.0).round() as u8,
                }),
                QuantMethod::Awq => Some(Smooth::Awq),
                _ => None,
            },
            fallback_percent: self.quant_fallback,
            ..options
        };
        Ok(Some(QuantizeOptions {
            keep_lm_head,
            ..options
        }))
    }
}

/// The KV cache's options (the `kv-cache` pass's).
#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// Cache slots per layer without a window: the longest context.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(i64).range(1..))]
    pub max_context: i64,
    /// Keep only the last W tokens (plus the sinks): memory stays flat.
    #[arg(long, value_name = "W", default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..))]
    pub kv_window: i64,
    /// With --kv-window: keep the first S tokens for good.
    #[arg(long, value_name = "S", default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..))]
    pub kv_sinks: i64,
    /// The cache's element type (f16: half the cache memory and bytes
    /// read; i8: INT8 per head and token with the row's scale, about a
    /// quarter; attention reads either as stored).
    #[arg(long, value_enum, default_value_t = KvDtype::F32)]
    pub kv_dtype: KvDtype,
    /// Which rows of a step get logits: the chunk's last token (the one
    /// generation reads) or all.
    #[arg(long, value_enum, default_value_t = PrefillLogits::Last)]
    pub prefill_logits: PrefillLogits,
}

impl KvArgs {
    /// The `kv-cache` options (the steps' length comes from the buckets)
    /// and whether `last-logits` runs; fails when they do not go together.
    pub fn options(&self) -> anyhow::Result<(KvCacheOptions, bool)> {
        let options = KvCacheOptions {
            max_context: self.max_context,
            window: self.kv_window,
            sinks: self.kv_sinks,
            dtype: match self.kv_dtype {
                KvDtype::F32 => slmcc_ir::DType::F32,
                KvDtype::F16 => slmcc_ir::DType::F16,
                KvDtype::I8 => slmcc_ir::DType::I8,
            },
            ..KvCacheOptions::default()
        };
        options.check().map_err(anyhow::Error::msg)?;
        Ok((options, self.prefill_logits == PrefillLogits::Last))
    }
}

const GENERATE_AFTER_HELP: &str = "\
The model's fused graph gets a static KV cache (the kv-cache pass): one graph
per prefill bucket and one for decode (bucket 1), sharing the cache. The
prompt is prefilled, then one token per step is decoded; tokens stream to
stdout as they come (ids, or text with --tokenizer), and the time to first
token and the decode rate go to stderr.

Examples:
  slmcc generate testdata/models/qwen2.onnx --prompt-ids 1,2,3 --max-new-tokens 16
  slmcc generate model.onnx --prompt-ids 1,2,3 --temperature 0.8 --top-p 0.9 --seed 1
  slmcc generate model.onnx --prompt \"Hello\" --tokenizer tokenizer.json
  slmcc generate model.onnx --prompt-ids 1 --max-new-tokens 10000 --kv-window 256 --kv-sinks 4";

const RUN_AFTER_HELP: &str = "\
Shapes:
  Without --buckets, the symbols (seq) are bound from the input shapes: the
  reference interpreter checks every result against them, and the cpu backend
  specialises the graph to them and JIT-compiles it for this input.

  With --buckets B (e.g. 64,128), the model is specialised to each bucket
  first; the input is padded at the end of its seq axis up to the smallest
  bucket that holds it (token id 0; attention_mask with 0) and the outputs
  are sliced back to its length. On cpu the pipeline is the fusion
  pipeline and widen-half, then bucket-specialize{buckets=B},plan-memory,
  and that bucket runs inside its planned arena: its regions are allocated
  and its kernels compiled once at load, and the step itself allocates
  nothing. On reference the fusion pipeline runs, then bucket-specialize.
  A .slm already specialised to buckets (slmcc opt ... bucket-specialize)
  runs on its buckets without --buckets.

Example:
  slmcc run testdata/models/llama.onnx --backend cpu --buckets 64,128 \\
    --input input_ids=ids.npy --output-dir out/";

#[derive(Args, Debug)]
pub struct OnnxTestArgs {
    /// Test folders (holding `model.onnx` and `test_data_set_N/`), or folders of them.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = BackendArg::Reference)]
    pub backend: BackendArg,
    /// Run only the tests this file lists (one name per line, `#` comments),
    /// looked up in the folders given; a listed test that is missing fails.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Also write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub threads: ThreadsArgs,
}

#[derive(Args, Debug)]
pub struct GoldenArgs {
    #[command(subcommand)]
    pub action: GoldenAction,
}

#[derive(Subcommand, Debug)]
pub enum GoldenAction {
    /// Run each model on its golden inputs and compare every recorded layer.
    Check(GoldenCheckArgs),
    /// Record goldens of an ONNX model from onnxruntime: every value of the
    /// model that the fused graph keeps, under its ONNX name.
    #[command(after_long_help = GOLDEN_RECORD_AFTER_HELP)]
    Record(GoldenRecordArgs),
}

const GOLDEN_RECORD_AFTER_HELP: &str = "\
The model is imported and fused as `golden check` runs it; every value of
the fused graph that is a float32 output of an ONNX node (or of the graph)
is added as a graph output of a copy of the model, which onnxruntime runs
(CPU, ORT_DISABLE_ALL, one thread) through the Python that --python names
(it needs onnx, onnxruntime and numpy: testdata/requirements-ci.txt pins
them). DIR gets manifest.json (the model's path and SHA-256, onnxruntime's
version, FP32 tolerances for reference and cpu) and case0/ with the inputs
and one .npy per value. `golden check DIR` then compares every value and
names the first op whose output diverges. DIR must not exist or be empty;
a failed record leaves nothing.

With --self, the values are slmcc's own on --backend (and --quant), and the
manifest's tolerance for that backend (or quantization) is 0: `golden check
DIR --backend B [--quant Q]` then passes only while the numerics stay bit
for bit the same (self-goldens: what catches a kernel change in a W8A8 or
W4A8 path, or on the NPU, where FP32 tolerances cannot). With --self, MODEL
may be a package (.slmpkg): its bucket graphs run as compiled, the inputs
padded into the smallest bucket that holds them as `golden check` pads
them, every value of that bucket recorded whole, under the tolerance key
of the package's own quantization (`--quant` is refused).

Example:
  slmcc golden record testdata/models/qwen2.onnx -o goldens-qwen2 \\
    --input input_ids=goldens/qwen2/seq5/input_ids.npy
  slmcc golden check goldens-qwen2 --backend cpu
  slmcc golden record testdata/models/qwen2.onnx -o self-w8a8 --self --backend npu-sim \\
    --quant w8a8 --input input_ids=goldens/qwen2/seq5/input_ids.npy
  slmcc golden check self-w8a8 --backend npu-sim --quant w8a8";

#[derive(Args, Debug)]
pub struct GoldenRecordArgs {
    /// The ONNX model, or with --self a package (.slmpkg).
    pub model: PathBuf,
    /// The folder to write (must not exist, or be empty).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// An input as NAME=FILE.npy or NAME=FILE.pb; repeat per input.
    #[arg(long, value_name = "NAME=FILE", conflicts_with = "inputs")]
    pub input: Vec<String>,
    /// The inputs in ONNX test-data layout: DIR/input_0.pb, input_1.pb, …
    /// (named by their TensorProto names, else in graph input order).
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// The Python with onnx and onnxruntime [default: $SLMCC_PYTHON, else
    /// python3].
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<PathBuf>,
    /// Self-goldens: record slmcc's own values on --backend (with --quant),
    /// not onnxruntime's; `golden check` with the same --backend and --quant
    /// then compares them bit for bit (tolerance 0), which catches any
    /// change of a kernel's numerics.
    #[arg(long = "self")]
    pub ours: bool,
    /// With --self: where to run.
    #[arg(long, value_enum, default_value_t = BackendArg::Reference, requires = "ours")]
    pub backend: BackendArg,
    /// With --self: the model quantized as `golden check --quant` runs it.
    #[command(flatten)]
    pub quant: QuantArgs,
    /// Without --self: also run slmcc with each of these quantizations on
    /// cpu, measure how far its values land from onnxruntime's, and write
    /// the manifest's `tolerances.<scheme>` for `golden check --quant`:
    /// the worst value's max_rel x1.5 and 1 - its cosine x2.
    #[arg(
        long,
        value_name = "SCHEME,...",
        value_enum,
        value_delimiter = ',',
        conflicts_with = "ours"
    )]
    pub quant_tolerances: Vec<QuantScheme>,
    #[command(flatten)]
    pub threads: ThreadsArgs,
}

#[derive(Args, Debug)]
pub struct GoldenCheckArgs {
    /// Golden folders (`goldens/<model>/` with `manifest.json`) or manifest files.
    #[arg(required = true)]
    pub goldens: Vec<PathBuf>,
    /// For a manifest that names a package: the key that must have signed
    /// it, and its weights key.
    #[command(flatten)]
    pub keys: PackageKeys,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = BackendArg::Reference)]
    pub backend: BackendArg,
    #[command(flatten)]
    pub threads: ThreadsArgs,
    /// Check the model quantized (`quantize` after fusion) against the
    /// same goldens, with the manifest's `tolerances.<quant>` (`max_rel`
    /// and `min_cosine` per layer).
    #[command(flatten)]
    pub quant: QuantArgs,
    /// Passes of your own to run after fusion and quantization, before the
    /// buckets (a pipeline, as `opt --passes` takes): to see their effect
    /// on the numbers. Models only; a package's passes ran at compile time.
    #[arg(long, value_name = "PIPELINE")]
    pub extra_passes: Option<String>,
    /// Also write the results as JSON: every layer's max_abs, max_rel,
    /// cosine, tolerance and verdict, and the first divergence.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A package (`.slmpkg`), a module with memory plans (`.slm` from
    /// `slmcc opt ... plan-memory`), or a model to plan now (`.onnx`, or
    /// `.slm` without plans).
    pub package: PathBuf,
    /// When planning now: the sequence-length buckets [default: 128,256,512].
    #[arg(long, value_name = "N,N,...")]
    pub buckets: Option<String>,
    /// Also write an SVG picture of every bucket's arena over time.
    #[arg(long, value_name = "FILE")]
    pub plan_svg: Option<PathBuf>,
    /// An encrypted package's weights key (`compile --encrypt`): the
    /// report reads the weights (--card does not need it).
    #[arg(long, value_name = "KEYFILE")]
    pub decrypt: Option<PathBuf>,
    /// When planning now: the target (`rk3588` quantizes, w8a8 by
    /// default, and adds the estimate); a package reports its own.
    #[arg(long, value_enum)]
    pub target: Option<Target>,
    #[command(flatten)]
    pub quant: QuantArgs,
    /// rk3588: the prompt length of the time-to-first-token estimate (the
    /// smallest bucket that holds it) and the context of the decode one.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub prompt_len: usize,
    /// rk3588: print the disassembly of every NPU program.
    #[arg(long)]
    pub asm: bool,
    /// Report the fusion instead (a model, `.onnx` or `.slm` before
    /// fusion): the fused ops of the fused graph, each attention's
    /// attributes, and the candidates left unfused.
    #[arg(long, conflicts_with_all = ["buckets", "plan_svg", "asm"])]
    pub fusion: bool,
    /// Print the package's model card instead: `md` (Markdown, the
    /// default) or `json` (as stored in the package).
    #[arg(long, value_enum, value_name = "FORMAT", num_args = 0..=1,
          default_missing_value = "md", conflicts_with_all = ["plan_svg", "asm", "fusion"])]
    pub card: Option<CardFormat>,
}

/// How `report --card` prints the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CardFormat {
    Md,
    Json,
}

const REPORT_AFTER_HELP: &str = "\
Input:
  A package (.slmpkg, from slmcc compile) is verified and reported with its
  sizes and digests, version set, options and kernels, then its plans.
  A .slm module that already holds memory plans is reported as it is.
  Anything else (.onnx, or .slm without plans) is planned first with the
  fusion pipeline, widen-half and bucket-specialize{buckets=B},plan-memory,
  where B is --buckets (default 128,256,512).

Output, per planned graph (one per bucket): the bucket, steps and tensors,
the size of each region (arena, weights, constants, kv_cache, scratch), the
arena against its lower bound (the largest sum of tensors live at one step),
tensors computed in place, and the peak total (all regions together).

--card prints the model card compile wrote into a package: the source's
SHA-256, exporter, opsets and licence; the compiler version and pipeline;
the quantization of every node that reads a weight and the calibration
set's hash; per bucket the memory plan totals and the placement (NPU or
CPU); for rk3588 the estimated latency per bucket and decode rate, marked
as estimates. --card json prints it as stored.

--plan-svg FILE draws one panel per graph: x = step, y = arena offset, one
box per tensor over its lifetime (hover for name, bytes and steps).

Example:
  slmcc report testdata/models/llama.onnx --buckets 64,128 --plan-svg plan.svg";
