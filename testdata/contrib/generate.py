"""Node tests for onnxruntime's contrib ops that slmcc imports
(SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, SkipLayerNormalization,
FastGelu, MatMulNBits, GroupQueryAttention, RotaryEmbedding, MultiHeadAttention), in the ONNX
backend test layout (NAME/model.onnx, NAME/test_data_set_0/input_N.pb and
output_N.pb), with onnxruntime's outputs as the expected ones.

    python testdata/contrib/generate.py [OUT]   (default: testdata/contrib/node_tests)

writes the tests into OUT and their list into manifest.txt beside OUT.

Needs only the CI packages (testdata/requirements-ci.txt: onnx, onnxruntime,
numpy). Deterministic (fixed seeds); `slmcc onnx-test --manifest
testdata/contrib/manifest.txt testdata/contrib/node_tests` runs them, and
compiler/tests/contrib.rs does so on every backend.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
MS = "com.microsoft"


def make_model(name, nodes, inputs, outputs, feeds, opsets, inits, dims=None):
    shapes = dims or [a.shape for a in feeds]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in zip(inputs, shapes)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits],
    )
    imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v) for d, v in opsets]
    model = helper.make_model(graph, opset_imports=imports, producer_name="slmcc-contrib-tests")
    model.ir_version = 8
    return model


def ort_run(model, outputs, inputs, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(outputs, dict(zip(inputs, feeds)))


def case(out: Path, name: str, nodes, inputs, outputs, feeds, opsets=((MS, 1),), inits=(),
         reference_nodes=None, dims=None):
    """One test; its expected outputs are onnxruntime's run of `reference_nodes`
    when given (the same computation in another form), else of `nodes`. `dims`
    declares the inputs' shapes (symbolic dims allowed), else the feeds' ones."""
    model = make_model(name, nodes, inputs, outputs, feeds, opsets, inits, dims)
    ref = make_model(name, reference_nodes, inputs, outputs, feeds, opsets, inits, dims) if reference_nodes else model
    got = ort_run(ref, outputs, inputs, feeds)
    d = out / name
    data = d / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, d / "model.onnx")
    for i, (n, a) in enumerate(zip(inputs, feeds)):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    for i, (n, a) in enumerate(zip(outputs, got)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    return name


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "node_tests"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    names = []
    # SimplifiedLayerNormalization: onnxruntime registers it in the default
    # domain (the genai builder writes it there).
    for shape, eps, axis in [((2, 8), 1e-6, -1), ((1, 3, 16), 1e-5, 2), ((2, 3, 5), 0.5, -1)]:
        x, g = f(*shape), f(shape[-1])
        attrs = {"epsilon": eps, "axis": axis}
        names.append(case(out, f"test_simplified_layer_norm_{len(shape)}d_eps{eps:g}",
                          [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], **attrs)],
                          ["x", "g"], ["y"], [x, g], opsets=()))
    # SkipSimplifiedLayerNormalization (com.microsoft), with and without the
    # bias, with and without the sum output.
    for bias in [False, True]:
        for with_sum in [False, True]:
            x, s, g, b = f(2, 4, 16), f(2, 4, 16), f(16), f(16)
            ins = ["x", "skip", "g"] + (["b"] if bias else [])
            feeds = [x, s, g] + ([b] if bias else [])
            outs = ["y", "", "", "sum"] if with_sum else ["y"]
            node = helper.make_node("SkipSimplifiedLayerNormalization", ins, outs, domain=MS, epsilon=1e-6)
            names.append(case(out, f"test_skip_simplified_layer_norm{'_bias' if bias else ''}"
                              f"{'_sum' if with_sum else ''}",
                              [node], ins, [o for o in outs if o], feeds))
    # The epsilon default (1e-12) on a 2-D input.
    x, s, g = f(3, 8), f(3, 8), f(8)
    names.append(case(out, "test_skip_simplified_layer_norm_2d_default_eps",
                      [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y"], domain=MS)],
                      ["x", "s", "g"], ["y"], [x, s, g]))
    # SkipLayerNormalization (com.microsoft): beta and bias optional.
    for beta, bias, with_sum in [(False, False, False), (True, False, True), (True, True, True)]:
        x, sk, g = f(2, 3, 16), f(2, 3, 16), f(16)
        ins, feeds = ["x", "skip", "g"], [x, sk, g]
        if beta or bias:
            ins.append("beta" if beta else "")
            feeds += [f(16)] if beta else []
        if bias:
            ins.append("bias")
            feeds.append(f(16))
        outs = ["y", "", "", "sum"] if with_sum else ["y"]
        node = helper.make_node("SkipLayerNormalization", ins, outs, domain=MS, epsilon=1e-5)
        names.append(case(out, f"test_skip_layer_norm{'_beta' if beta else ''}{'_bias' if bias else ''}"
                          f"{'_sum' if with_sum else ''}",
                          [node], [i for i in ins if i], [o for o in outs if o], feeds))
    # FastGelu (com.microsoft), with and without the bias. Inputs within
    # [-3, 3]: below about -4, 1 + tanh(z) cancels, and onnxruntime (whose
    # tanh saturates to -1 there, giving -0) and slmcc differ by up to
    # 1.5e-7 absolute, more than the tests' atol 1e-7.
    for bias in [False, True]:
        x, b = np.clip(f(2, 5, 8), -2, 2), np.clip(f(8), -1, 1)
        ins, feeds = (["x", "b"], [x, b]) if bias else (["x"], [x])
        names.append(case(out, f"test_fast_gelu{'_bias' if bias else ''}",
                          [helper.make_node("FastGelu", ins, ["y"], domain=MS)], ins, ["y"], feeds))
    # MatMulNBits (com.microsoft): B's bytes [N, K / block, block * bits / 8],
    # 4-bit values low nibble first; the zero point absent or the midpoint.
    # A holds quarter integers and the scales are powers of two, so every
    # product and sum is exact in f32 and the expected values do not depend
    # on the order of summation: the tests check the weights' layout and
    # meaning, not onnxruntime's rounding.
    for bits, k, n, block, zp, bias, level, a_shape in [
        (4, 32, 8, 16, False, False, 0, (2, 3, 32)),
        (4, 64, 16, 32, True, True, 1, (1, 4, 64)),
        (4, 48, 8, 16, True, False, 0, (1, 5, 48)),  # an odd block count
        (4, 256, 32, 128, False, True, 4, (2, 256)),
        (8, 32, 8, 16, False, False, 0, (3, 32)),
        (8, 64, 16, 32, True, True, 0, (1, 2, 64)),
        # Large enough for B to import as a module weight (not a constant):
        # compiler/tests/contrib.rs checks that its package stays 4-bit.
        (4, 512, 256, 32, False, False, 0, (1, 3, 512)),
        (4, 48, 8, 32, False, False, 0, (1, 2, 48)),  # the last block padded past K
    ]:
        blocks, mid = -(-k // block), 1 << (bits - 1)
        values = rng.integers(0, 1 << bits, size=(n, blocks, block), dtype=np.uint8)
        if bits == 4:
            b = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
        else:
            b = values
        scales = np.exp2(-rng.integers(2, 7, size=(n, blocks))).astype(np.float32)
        inits = [("B", b), ("scales", scales.reshape(-1))]
        ins = ["a", "B", "scales"]
        if zp:
            if bits == 4:
                nib = np.full((n, blocks + blocks % 2), mid, dtype=np.uint8)
                nib[:, blocks:] = 0  # the padding nibble of an odd count
                z = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
            else:
                z = np.full((n, blocks), mid, dtype=np.uint8)
            inits.append(("zp", z))
            ins.append("zp")
        if bias:
            ins += ["", "bias"] if zp else ["", "", "bias"]
            inits.append(("bias", f(n)))
        nbits = lambda level: helper.make_node("MatMulNBits", ins, ["y"], domain=MS, K=k, N=n, bits=bits,
                                               block_size=block, accuracy_level=level)
        a = (rng.integers(-16, 17, size=a_shape) / 4).astype(np.float32)
        # The large case declares a symbolic `seq`, so that it also compiles.
        dims = [(a_shape[0], "seq", a_shape[2])] if k == 512 else None
        # At level 4 onnxruntime may quantize A to int8; slmcc computes every
        # level in f32, so the expected values are onnxruntime's f32 ones
        # (level 0), and how far its level-4 run is from them is printed.
        reference = [nbits(0)] if level == 4 else None
        name = case(out, f"test_matmul_nbits_{bits}bit_k{k}_n{n}_block{block}"
                    f"{'_zp' if zp else ''}{'_bias' if bias else ''}_level{level}",
                    [nbits(level)], ["a"], ["y"], [a], inits=inits, reference_nodes=reference,
                    dims=dims)
        names.append(name)
        if reference:
            m = lambda lv: make_model(name, [nbits(lv)], ["a"], ["y"], [a], ((MS, 1),), inits)
            y4, y0 = ort_run(m(4), ["y"], ["a"], [a])[0], ort_run(m(0), ["y"], ["a"], [a])[0]
            print(f"{name}: onnxruntime at level 4 is {np.abs(y4 - y0).max() / np.abs(y0).max():.2e} "
                  "(max |diff| / max |y|) from its f32 run")
    # GroupQueryAttention (com.microsoft): packed or separate QKV, rotary or not,
    # a past of 0 (the prompt) or more tokens, softcap. seqlens_k and
    # total_sequence_length are what onnxruntime-genai feeds for one unpadded
    # sequence; the rotary caches are [max_pos, rotary_dim / 2] initializers.
    for packed, rotary, interleaved, past, seq, softcap, scale in [
        (True, False, False, 3, 2, 0.0, 0.0),
        (True, True, False, 0, 4, 0.0, 0.0),
        (True, True, False, 5, 1, 0.0, 0.3),
        (False, True, True, 2, 3, 5.0, 0.0),
    ]:
        heads, kv_heads, d, max_pos = 4, 2, 16, 16  # onnxruntime: head size a multiple of 16
        total = past + seq
        pos = np.arange(max_pos, dtype=np.float32)[:, None]
        freq = pos / (10000.0 ** (np.arange(0, d, 2, dtype=np.float32) / d))
        inits = [("seqlens_k", np.array([total - 1], np.int32)),
                 ("total_len", np.array([total], np.int32))]
        if packed:
            ins, feeds = ["qkv", "", ""], [f(1, seq, (heads + 2 * kv_heads) * d)]
        else:
            ins, feeds = ["q", "k", "v"], [f(1, seq, heads * d), f(1, seq, kv_heads * d),
                                          f(1, seq, kv_heads * d)]
        ins += ["past_k", "past_v", "seqlens_k", "total_len"]
        feeds += [f(1, kv_heads, past, d), f(1, kv_heads, past, d)]
        if rotary:
            ins += ["cos", "sin"]
            inits += [("cos", np.cos(freq)), ("sin", np.sin(freq))]
        attrs = dict(num_heads=heads, kv_num_heads=kv_heads, do_rotary=int(rotary),
                     rotary_interleaved=int(interleaved), softcap=softcap, scale=scale)
        node = helper.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"],
                                domain=MS, **attrs)
        graph_ins = [i for i in ins if i and i not in dict(inits)]
        names.append(case(out, f"test_group_query_attention{'_packed' if packed else ''}"
                          f"{'_rotary' if rotary else ''}{'_interleaved' if interleaved else ''}"
                          f"_past{past}_seq{seq}{'_softcap' if softcap else ''}"
                          f"{'_scale' if scale else ''}",
                          [node], graph_ins, ["y", "present_k", "present_v"], feeds, inits=inits))
    # RotaryEmbedding (com.microsoft): [b, s, hidden] with num_heads or [b, heads, s, d];
    # position_ids [b, s] or one offset; a rotary dim below the head size.
    for rank, interleaved, offset, rotary in [(3, False, False, 0), (3, True, True, 0),
                                              (4, False, True, 0), (3, False, False, 8)]:
        b, s, heads, d, max_pos = 2, 3, 2, 16, 12
        r = rotary or d
        x = f(b, s, heads * d) if rank == 3 else f(b, heads, s, d)
        pos_freq = np.arange(max_pos, dtype=np.float32)[:, None]
        freq = pos_freq / (10000.0 ** (np.arange(0, r, 2, dtype=np.float32) / r))
        pos = np.array([4], np.int64) if offset else rng.integers(0, max_pos, size=(b, s))
        inits = [("pos", pos.astype(np.int64)), ("cos", np.cos(freq)), ("sin", np.sin(freq))]
        attrs = dict(interleaved=int(interleaved))
        if rank == 3 or rotary:
            attrs["num_heads"] = heads
        if rotary:
            attrs["rotary_embedding_dim"] = rotary
        node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
        names.append(case(out, f"test_ms_rotary_embedding_{rank}d{'_interleaved' if interleaved else ''}"
                          f"{'_offset' if offset else ''}{f'_rotary{rotary}' if rotary else ''}",
                          [node], ["x"], ["y"], [x], inits=inits))
    # GroupQueryAttention with a sliding window (local_window_size): the prompt and a
    # step past the window.
    for past, seq, window in [(0, 6, 3), (5, 2, 4)]:
        heads, kv_heads, d = 4, 2, 16
        total = past + seq
        inits = [("seqlens_k", np.array([total - 1], np.int32)),
                 ("total_len", np.array([total], np.int32))]
        feeds = [f(1, seq, (heads + 2 * kv_heads) * d), f(1, kv_heads, past, d), f(1, kv_heads, past, d)]
        node = helper.make_node("GroupQueryAttention",
                                ["qkv", "", "", "past_k", "past_v", "seqlens_k", "total_len"],
                                ["y", "present_k", "present_v"], domain=MS, num_heads=heads,
                                kv_num_heads=kv_heads, local_window_size=window)
        names.append(case(out, f"test_group_query_attention_window{window}_past{past}_seq{seq}",
                          [node], ["qkv", "past_k", "past_v"], ["y", "present_k", "present_v"],
                          feeds, inits=inits))
    # MatMulNBits with asymmetric zero points (onnxruntime's quantizer with
    # is_symmetric=False): any nibble per block, K not a multiple of the block.
    for k, n, block in [(64, 16, 32), (48, 8, 32)]:
        blocks = -(-k // block)
        values = rng.integers(0, 16, size=(n, blocks, block), dtype=np.uint8)
        b = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
        scales = np.exp2(-rng.integers(2, 7, size=(n, blocks))).astype(np.float32)
        nib = rng.integers(0, 16, size=(n, blocks + blocks % 2), dtype=np.uint8)
        nib[:, blocks:] = 0
        z = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
        inits = [("B", b), ("scales", scales.reshape(-1)), ("zp", z)]
        node = helper.make_node("MatMulNBits", ["a", "B", "scales", "zp"], ["y"], domain=MS,
                                K=k, N=n, bits=4, block_size=block)
        a = (rng.integers(-16, 17, size=(1, 3, k)) / 4).astype(np.float32)
        names.append(case(out, f"test_matmul_nbits_4bit_k{k}_n{n}_block{block}_asymmetric",
                          [node], ["a"], ["y"], [a], inits=inits))
    # MultiHeadAttention (com.microsoft): self-attention with bias, causal with a past,
    # cross-attention over [b, heads, l, d] keys with an additive attention_bias.
    heads, d = 2, 8
    for name, s_len, kv_len, past, bias, causal, bnsh, attn_bias, scale in [
        ("self", 4, 4, 0, False, False, False, False, 0.0),
        ("self_bias_causal_past", 3, 3, 2, True, True, False, False, 0.0),
        ("cross_bnsh_attention_bias", 4, 5, 0, False, False, True, True, 0.2),
    ]:
        ins, feeds = ["q"], [f(1, s_len, heads * d)]
        if bnsh:
            feeds += [f(1, heads, kv_len, d), f(1, heads, kv_len, d)]
        else:
            feeds += [f(1, kv_len, heads * d), f(1, kv_len, heads * d)]
        ins += ["k", "v"]
        ins.append("bias" if bias else "")
        if bias:
            feeds.append(f(3 * heads * d))
        ins.append("")  # key_padding_mask
        ins.append("attn_bias" if attn_bias else "")
        if attn_bias:
            feeds.append(f(1, 1, s_len, kv_len))
        outs = ["y"]
        if past:
            ins += ["past_k", "past_v"]
            feeds += [f(1, heads, past, d), f(1, heads, past, d)]
            outs += ["present_k", "present_v"]
        while ins[-1] == "":
            ins.pop()
        attrs = dict(num_heads=heads, unidirectional=int(causal))
        if scale:
            attrs["scale"] = scale
        node = helper.make_node("MultiHeadAttention", ins, outs, domain=MS, **attrs)
        names.append(case(out, f"test_multi_head_attention_{name}", [node], [i for i in ins if i],
                          outs, feeds))
    manifest = out.parent / "manifest.txt"
    manifest.write_text(
        "# onnxruntime contrib-op node tests (testdata/contrib/generate.py, onnxruntime "
        f"{ort.__version__}) that `slmcc onnx-test` must pass.\n" + "".join(n + "\n" for n in names)
    )
    print(f"wrote {len(names)} tests under {out} and {manifest}")


if __name__ == "__main__":
    main()
