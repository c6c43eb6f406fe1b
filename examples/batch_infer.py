"""Batch inference with the model examples/train_ddp.py registers (--save-model).

Loads the model (config.json rebuilds the MLP, model.pt holds its weights), reads every
*.csv file of the input dataset version in name order (a header row: an optional `id`
column and x0..x<in_dim-1>), and writes to the output directory:

    predictions.csv   id,prediction (one row per input row, in input order)
    summary.json      rows, files, model, mean/min/max of the predictions

A Torus inference job gets its inputs from the platform (docs/jobs.md, Batch inference):

    TORUS_MODEL_PATH        the model version's files, read-only
    TORUS_DATASET_<AS>      each input dataset version, read-only (--input-as, default INPUT)
    TORUS_OUTPUT_DIR        where the predictions go; a new dataset version on success

It logs a progress line per batch. CPU only, single process. To make an input file:

    python batch_infer.py --make-inputs inputs.csv --rows 1000 --seed 7
"""

import argparse
import csv
import json
import os
import sys
import time

import torch
from torch import nn


def log(message: str) -> None:
    print(f"batch_infer: {message}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=os.environ.get("TORUS_MODEL_PATH"), help="model dir")
    p.add_argument("--input-as", default="INPUT", help="read $TORUS_DATASET_<AS>")
    p.add_argument("--input", help="input dir or CSV file (default: $TORUS_DATASET_<AS>)")
    p.add_argument("--output", default=os.environ.get("TORUS_OUTPUT_DIR"), help="output dir")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--make-inputs", metavar="FILE", help="write a random input CSV and exit")
    p.add_argument("--rows", type=int, default=1000, help="with --make-inputs")
    p.add_argument("--in-dim", type=int, default=16, help="with --make-inputs")
    p.add_argument("--seed", type=int, default=7, help="with --make-inputs")
    args = p.parse_args(argv)
    if args.make_inputs:
        return args
    args.input = args.input or os.environ.get(f"TORUS_DATASET_{args.input_as}")
    for name in ("model", "input", "output"):
        if not getattr(args, name):
            p.error(f"--{name} is needed (or the platform's environment variable)")
    if args.batch_size < 1:
        p.error("--batch-size must be at least 1")
    return args


def make_inputs(path: str, *, rows: int, in_dim: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, in_dim, generator=g)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["id"] + [f"x{i}" for i in range(in_dim)])
        for index, row in enumerate(x.tolist()):
            writer.writerow([f"r{index:06d}"] + [f"{v:.6f}" for v in row])
    log(f"wrote {rows} rows to {path}")


def load_model(directory: str) -> tuple[nn.Module, dict]:
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if config.get("architecture") != "mlp":
        raise SystemExit(f"batch_infer: unknown architecture {config.get('architecture')!r}")
    model = nn.Sequential(
        nn.Linear(config["in_dim"], config["hidden"]),
        nn.Tanh(),
        nn.Linear(config["hidden"], config["out_dim"]),
    )
    state = torch.load(os.path.join(directory, "model.pt"), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    return model, config


def input_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    found = []
    for root, _dirs, files in os.walk(path):
        found += [os.path.join(root, name) for name in files if name.endswith(".csv")]
    if not found:
        raise SystemExit(f"batch_infer: no .csv files in {path}")
    return sorted(found)


def read_rows(path: str, in_dim: int) -> tuple[list[str], torch.Tensor]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        columns = [f"x{i}" for i in range(in_dim)]
        missing = [c for c in columns if c not in header]
        if missing:
            raise SystemExit(f"batch_infer: {path} lacks columns {', '.join(missing[:5])}")
        where = [header.index(c) for c in columns]
        id_at = header.index("id") if "id" in header else None
        ids, values = [], []
        for number, row in enumerate(reader):
            ids.append(row[id_at] if id_at is not None else f"{os.path.basename(path)}:{number}")
            values.append([float(row[i]) for i in where])
    return ids, torch.tensor(values, dtype=torch.float32).reshape(-1, in_dim)


def infer(args) -> dict:
    torch.set_num_threads(1)
    started = time.monotonic()
    model, config = load_model(args.model)
    log(f"model loaded from {args.model} ({os.environ.get('TORUS_MODEL', 'local')})")
    files = input_files(args.input)
    os.makedirs(args.output, exist_ok=True)
    rows, total, low, high = 0, 0.0, float("inf"), float("-inf")
    target = os.path.join(args.output, "predictions.csv")
    with open(target + ".tmp", "w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["id", "prediction"])
        for path in files:
            ids, x = read_rows(path, config["in_dim"])
            with torch.no_grad():
                for start in range(0, len(ids), args.batch_size):
                    y = model(x[start : start + args.batch_size]).reshape(-1).tolist()
                    for ident, value in zip(ids[start : start + args.batch_size], y, strict=True):
                        writer.writerow([ident, f"{value:.6f}"])
                    rows += len(y)
                    total += sum(y)
                    low, high = min([low, *y]), max([high, *y])
                    log(f"progress file={os.path.basename(path)} rows={rows}")
    os.replace(target + ".tmp", target)
    summary = {
        "rows": rows,
        "files": [os.path.relpath(p, args.input) if p != args.input else p for p in files],
        "model": os.environ.get("TORUS_MODEL", args.model),
        "model_steps": config.get("steps"),
        "mean": total / rows if rows else None,
        "min": low if rows else None,
        "max": high if rows else None,
        "seconds": round(time.monotonic() - started, 3),
    }
    with open(os.path.join(args.output, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    log(f"done rows={rows} output={args.output}")
    print(json.dumps({"batch_infer_rows": rows, "mean": summary["mean"]}), flush=True)
    return summary


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.make_inputs:
        make_inputs(args.make_inputs, rows=args.rows, in_dim=args.in_dim, seed=args.seed)
        return 0
    infer(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
