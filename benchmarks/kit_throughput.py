"""kit build / verify / rebuild throughput against ``tar -cf - DIR | sha256sum``.

Generates (once, in --dir, default /tmp) a base image of --base-mib MiB (two
uncompressed layers, files from 1 KiB to 8 MiB, mostly small) and a working layer of
--work-mb MB (Python patches, shell scripts, blobs, a whiteout, an opaque dir),
as OCI layouts. Then, in the same run, times on the same data:

- reference: ``tar -cf - base-rootfs work-rootfs | sha256sum`` (all the bytes),
- kit build --source (reads and hashes every base and working byte: blob
  digests, diffIDs, per-file sha256 for the filesystem manifest; writes the kit),
- reference: ``tar -cf - work-rootfs | sha256sum`` (what a kit carries),
- kit verify (sidecar, unpack, member sums, layer scan, payload, compile),
- kit rebuild onto the base (copy + read-back proof of all layers).

Reports seconds, MB/s and the ratio servekit/reference (goal: >= 0.5 for build
and verify), median of --repeat runs.

    .venv/bin/python benchmarks/kit_throughput.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from servekit.kit.build import build_kit
from servekit.kit.options import KitBuildOptions, KitRebuildOptions, KitVerifyOptions
from servekit.kit.rebuild import rebuild_kit
from servekit.kit.verify import verify_kit

MIB = 1 << 20
# Many small files and a few large ones (about 6,000 files per GiB), as in real images.
BASE_SIZES = [1024] * 40 + [16384] * 30 + [131072] * 20 + [MIB] * 7 + [8 * MIB]


def _blob(rng: random.Random, size: int) -> bytes:
    """Half random, half repetitive bytes: realistic for compression and hashing."""
    head = rng.randbytes(size // 2)
    return head + (b"servekit " * (size // 18 + 1))[: size - len(head)]


def _write_tree(root: Path, total: int, seed: int, sizes: list[int]) -> int:
    rng = random.Random(seed)
    written = 0
    i = 0
    while written < total:
        size = min(rng.choice(sizes), total - written)
        path = root / f"d{i % 37:02d}" / f"f{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_blob(rng, size))
        written += size
        i += 1
    return written


def _work_tree(root: Path, total: int) -> int:
    (root / "opt" / "app" / "patches").mkdir(parents=True)
    for i in range(40):
        src = "".join(f"def f{i}_{j}(x):\n    return x + {j}\n\n" for j in range(200))
        (root / "opt" / "app" / "patches" / f"p{i:02d}.py").write_text(src)
    (root / "opt" / "app" / "serve.sh").write_text("#!/bin/bash\nMAX_SEQS=${MAX_SEQS:-32}\n")
    used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return used + _write_tree(root / "opt" / "app" / "blobs", total - used, 7, [MIB, 4 * MIB])


def _layer(src: Path, dest: Path, extra: list[tarfile.TarInfo] = ()) -> None:  # type: ignore[assignment]
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for info in extra:
            tar.addfile(info)
        for path in sorted(src.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(src)), recursive=False)


def _marker(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 0
    return info


def _oci(root: Path, layers: list[Path]) -> None:
    import hashlib

    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    descs, diffs = [], []
    for layer in layers:
        sha = hashlib.sha256()
        with layer.open("rb") as fh:
            while block := fh.read(MIB):
                sha.update(block)
        digest = sha.hexdigest()
        target = blobs / digest
        if not target.exists():
            os.link(layer, target)
        descs.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": f"sha256:{digest}",
                "size": layer.stat().st_size,
            }
        )
        diffs.append(f"sha256:{digest}")

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = {"rootfs": {"type": "layers", "diff_ids": diffs}, "config": {"Cmd": ["/bin/sh"]}}
    cdesc = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **put(json.dumps(config).encode()),
    }
    manifest = {"schemaVersion": 2, "config": cdesc, "layers": descs}
    mdesc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **put(json.dumps(manifest).encode()),
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [mdesc]}))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')


def generate(top: Path, base_mib: int, work_mb: int) -> dict[str, int]:
    """Make the rootfs folders, the layer tars and both OCI layouts (once)."""
    stamp = top / f"ready-v2-{base_mib}-{work_mb}"
    if stamp.exists():
        return json.loads(stamp.read_text())
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    half = base_mib * MIB // 2
    sizes = {
        "base": _write_tree(top / "base-rootfs" / "a", half, 1, BASE_SIZES)
        + _write_tree(top / "base-rootfs" / "b", base_mib * MIB - half, 2, BASE_SIZES),
        "work": _work_tree(top / "work-rootfs", work_mb * 1_000_000),
    }
    (top / "base-rootfs" / "a" / "d00" / "f00000.bin").rename(top / "gone.bin")
    layers = top / "layers"
    layers.mkdir()
    _layer(top / "base-rootfs" / "a", layers / "l1.tar")
    _layer(top / "base-rootfs" / "b", layers / "l2.tar")
    _layer(
        top / "work-rootfs",
        layers / "l3.tar",
        [_marker(".wh.gone.bin"), _marker("d01/.wh..wh..opq")],
    )
    _oci(top / "base", [layers / "l1.tar", layers / "l2.tar"])
    _oci(top / "source", [layers / "l1.tar", layers / "l2.tar", layers / "l3.tar"])
    stamp.write_text(json.dumps(sizes))
    return sizes


def _tar_sha(*dirs: Path) -> float:
    start = time.perf_counter()
    cmd = (
        f"tar -C {dirs[0].parent} -cf - "
        + " ".join(d.name for d in dirs)
        + " | sha256sum > /dev/null"
    )
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True)
    return time.perf_counter() - start


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _compile_only(root: Path) -> float:
    """compile() of the same Python sources verify compiles (work the reference skips)."""
    sources = [(p, p.read_bytes()) for p in sorted(root.rglob("*.py"))]
    start = time.perf_counter()
    for path, data in sources:
        compile(data, str(path), "exec", dont_inherit=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/servekit-kitbench"))
    parser.add_argument("--base-mib", type=int, default=1024)
    parser.add_argument("--work-mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    args = parser.parse_args()
    top: Path = args.dir
    sizes = generate(top, args.base_mib, args.work_mb)
    _tar_sha(top / "base-rootfs", top / "work-rootfs")  # warm the page cache
    kit = top / "out" / "bench.tar.zst"
    rows: dict[str, list[float]] = {
        k: [] for k in ("tar_all", "build", "tar_work", "verify", "compile_only", "rebuild")
    }
    for _ in range(args.repeat):
        shutil.rmtree(top / "out", ignore_errors=True)
        rows["tar_all"].append(_tar_sha(top / "base-rootfs", top / "work-rootfs"))
        req = KitBuildOptions(base=str(top / "base"), source=str(top / "source"), out=kit)
        rows["build"].append(_timed(lambda req=req: build_kit(req)))
        rows["tar_work"].append(_tar_sha(top / "work-rootfs"))
        rows["verify"].append(_timed(lambda: verify_kit(KitVerifyOptions(archive=kit))))
        rows["compile_only"].append(_compile_only(top / "work-rootfs"))
        rreq = KitRebuildOptions(kit=kit, base=str(top / "base"), out=top / "out" / "rebuilt")
        rows["rebuild"].append(_timed(lambda rreq=rreq: rebuild_kit(rreq)))
    med = {k: statistics.median(v) for k, v in rows.items()}
    all_mb = (sizes["base"] + sizes["work"]) / 1e6
    work_mb = sizes["work"] / 1e6
    report = {
        "data_mb": {"base": round(sizes["base"] / 1e6, 1), "work": round(work_mb, 1)},
        "kit_mb": round(kit.stat().st_size / 1e6, 2),
        "seconds_median": {k: round(v, 3) for k, v in med.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in rows.items()},
        "mb_per_s": {
            "tar_all": round(all_mb / med["tar_all"], 1),
            "build": round(all_mb / med["build"], 1),
            "tar_work": round(work_mb / med["tar_work"], 1),
            "verify": round(work_mb / med["verify"], 1),
            "rebuild": round(all_mb / med["rebuild"], 1),
        },
        "ratio_vs_tar_sha256sum": {
            "build": round(med["tar_all"] / med["build"], 3),
            "verify": round(med["tar_work"] / med["verify"], 3),
            "verify_without_compile": round(
                med["tar_work"] / max(1e-9, med["verify"] - med["compile_only"]), 3
            ),
            "rebuild": round(med["tar_all"] / med["rebuild"], 3),
        },
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))
    if not args.keep:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
