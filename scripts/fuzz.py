"""The long fuzz run: the property tests of tests/test_fuzz.py with many more examples, random
seeds, and failing inputs kept.

    python3 scripts/fuzz.py [EXAMPLES] [--keep DIR]

The normal suite runs a bounded, derandomized slice (25 examples); this runs EXAMPLES (default
2000) with fresh randomness each time. A failing input is written to DIR (default ./fuzz-failures)
and the command line that broke is in the report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    examples = next((a for a in argv if a.isdigit()), "2000")
    keep = Path(argv[argv.index("--keep") + 1]) if "--keep" in argv else Path("fuzz-failures")
    keep.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGTOOL_FUZZ_PROFILE": "long", "CGTOOL_FUZZ_EXAMPLES": examples,
           "CGTOOL_FUZZ_KEEP": str(keep.resolve()), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", str(ROOT / "tests" / "test_fuzz.py"), "-p", "no:cacheprovider"]
    print(f"fuzzing with {examples} examples per property; failing inputs go to {keep}", flush=True)
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
