"""Write a small Llama-architecture GGUF with random weights and a real tokenizer.

No download: the tokenizer (Llama-2's SentencePiece vocabulary, 32000 tokens) is copied from
the vocab-only GGUF that ships with the engine's source (models/ggml-vocab-llama-spm.gguf,
installed beside llama-server by `make engines`). The weights are seeded random numbers, so
the same arguments always give the same file; the model talks gibberish in real tokens, which
is what plumbing, load and memory tests need.

    python make_tiny_llama.py OUT.gguf                    # GQA: 4 layers, hidden 256, 4/2 heads
    python make_tiny_llama.py OUT.gguf --kv-heads 4       # MHA
    python make_tiny_llama.py OUT.gguf --weights q8_0     # 8-bit weights

Needs numpy and the `gguf` package matching the engine (`make engines` installs both).
"""

import argparse
import os
import sys
from pathlib import Path

import gguf
import numpy as np

VOCAB_NAME = "ggml-vocab-llama-spm.gguf"
WEIGHT_TYPES = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
}
FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}


def default_vocab() -> Path | None:
    """$TORUS_LLAMA_VOCAB, else the vocabulary installed beside the engine in the shared root
    this script is read from (<root>/examples/serving/ -> <root>/engines/llama.cpp/models/)."""
    if os.environ.get("TORUS_LLAMA_VOCAB"):
        return Path(os.environ["TORUS_LLAMA_VOCAB"])
    beside = Path(__file__).resolve().parents[2] / "engines" / "llama.cpp" / "models" / VOCAB_NAME
    return beside if beside.is_file() else None


def copy_tokenizer(writer: gguf.GGUFWriter, vocab: Path) -> int:
    """Copies every tokenizer.* key of the vocab-only GGUF; returns the vocabulary size."""
    reader = gguf.GGUFReader(vocab)
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, main, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if not n_vocab:
        raise SystemExit(f"{vocab}: no tokenizer.ggml.tokens")
    return n_vocab


def build(args: argparse.Namespace) -> None:
    if args.hidden % args.heads or args.heads % args.kv_heads:
        raise SystemExit("--hidden must divide by --heads, and --heads by --kv-heads")
    head_dim = args.hidden // args.heads
    kv_dim = head_dim * args.kv_heads
    wtype = WEIGHT_TYPES[args.weights]
    if wtype == gguf.GGMLQuantizationType.Q8_0 and (args.hidden % 32 or args.ff % 32):
        raise SystemExit("q8_0 weights need --hidden and --ff divisible by 32")

    writer = gguf.GGUFWriter(args.out, "llama")
    writer.add_name(args.name)
    writer.add_context_length(args.ctx)
    writer.add_embedding_length(args.hidden)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(FILE_TYPES[args.weights])
    n_vocab = copy_tokenizer(writer, args.vocab)
    writer.add_vocab_size(n_vocab)

    rng = np.random.default_rng(args.seed)

    def matrix(name: str, rows: int, cols: int) -> None:
        # numpy's (rows, cols) is GGUF's ne = [cols, rows]: rows outputs of cols inputs
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if wtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, data)
        elif wtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, wtype), raw_dtype=wtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(args.hidden, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, args.hidden)
    for i in range(args.layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", args.hidden, args.hidden)
        matrix(f"blk.{i}.attn_k.weight", kv_dim, args.hidden)
        matrix(f"blk.{i}.attn_v.weight", kv_dim, args.hidden)
        matrix(f"blk.{i}.attn_output.weight", args.hidden, args.hidden)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", args.ff, args.hidden)
        matrix(f"blk.{i}.ffn_up.weight", args.ff, args.hidden)
        matrix(f"blk.{i}.ffn_down.weight", args.hidden, args.ff)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, args.hidden)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    parser.add_argument("--vocab", type=Path, default=default_vocab(), help=VOCAB_NAME)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--ff", type=int, default=688, help="feed-forward width")
    parser.add_argument("--ctx", type=int, default=2048, help="training context length")
    parser.add_argument("--weights", choices=sorted(WEIGHT_TYPES), default="f16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="tiny-llama-random")
    args = parser.parse_args(argv)
    if args.vocab is None or not args.vocab.is_file():
        parser.error(f"no vocabulary: give --vocab PATH/{VOCAB_NAME} or set TORUS_LLAMA_VOCAB")
    for name in ("layers", "hidden", "heads", "kv_heads", "ff", "ctx"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    build(args)
    print(args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
