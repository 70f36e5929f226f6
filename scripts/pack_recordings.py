"""Copy recordings made by scripts/record_programs.sh into tests/data/record_<name>/, gzipping the JSON.

    python scripts/pack_recordings.py OUTDIR [tests/data]

Per program: the recording's files (index, graphs, trace) as .json.gz, and the run's stdout.txt,
stderr.txt (last 60 lines) and exit_code.txt. Per-rank subfolders are kept.
"""
from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path


def pack(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    if src.exists():
        for f in sorted(src.rglob("*")):
            if f.is_dir():
                continue
            rel = f.relative_to(src)
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            if f.suffix == ".json":
                (dst / rel).with_name(rel.name + ".gz").write_bytes(gzip.compress(f.read_bytes(), 9, mtime=0))
            else:
                shutil.copy(f, dst / rel)
    run = src.with_name(src.name + ".run")
    for name in ("stdout.txt", "exit_code.txt"):
        if (run / name).exists():
            shutil.copy(run / name, dst / name)
    if (run / "stderr.txt").exists():
        lines = (run / "stderr.txt").read_text(errors="replace").splitlines()[-60:]
        (dst / "stderr.txt").write_text("\n".join(lines) + "\n")


def main() -> None:
    out = Path(sys.argv[1])
    data = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[1] / "tests" / "data"
    for src in sorted(out.glob("record_*")):
        if src.name.endswith(".run"):
            continue
        pack(src, data / src.name)
    for run in sorted(out.glob("record_*.run")):
        name = run.name[: -len(".run")]
        if not (out / name).exists():
            pack(out / name, data / name)
    total = sum(f.stat().st_size for f in data.glob("record_*/**/*") if f.is_file())
    print(f"packed into {data}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
