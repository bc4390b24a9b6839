"""Run every benchmark and write ``benchmarks/RESULTS.md``.

Each ``benchmarks/*.py`` (except this file) runs as its own subprocess with the project's venv
python, from the repository root, with a timeout (10 minutes by default) and ``OMP_NUM_THREADS``
unset so it uses the whole machine. Its last stdout line (``key=value`` pairs) is the headline; its
wall time is recorded. A script that fails or times out is recorded as failed with its last stderr
line; the run goes on.

``--only NAME [NAME...]`` runs a subset (``penalty_overhead`` or ``penalty_overhead.py``); the rows
of the other scripts are kept from the previous ``RESULTS.md`` (marked with their own date).
``--threads N`` sets ``OMP_NUM_THREADS=N`` for the children instead (a busy machine); it is noted.

Run: ``python benchmarks/run_all.py`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from leakloss.atomic import write_text_atomic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"
DATA_TAG = "run_all-data"
DEFAULT_TIMEOUT_S = 600


def venv_python() -> str:
    for candidate in (ROOT / ".venv" / "bin" / "python", ROOT / ".venv" / "Scripts" / "python.exe"):
        if candidate.exists():
            return str(candidate)
    return sys.executable


def discover() -> list[str]:
    me = Path(__file__).name
    return sorted(p.stem for p in HERE.glob("*.py") if p.name != me and not p.name.startswith("_"))


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _ram_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 ** 2:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown RAM"


def machine(python: str) -> dict[str, str]:
    """CPU model, cores, RAM, and (from the venv's torch) torch version and GPU."""
    probe = ("import torch; g = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'; "
             "print(torch.__version__); print(g)")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120,
                             env=child_env(None), cwd=ROOT)
        lines = out.stdout.strip().splitlines()
        ok = out.returncode == 0 and len(lines) >= 2
        torch_version, gpu = (lines[0], lines[1]) if ok else ("unavailable", "unknown")
    except (OSError, subprocess.TimeoutExpired):
        torch_version, gpu = "unavailable", "unknown"
    return {"cpu": _cpu_model(), "cores": str(os.cpu_count() or "?"), "ram": _ram_gib(),
            "torch": torch_version, "gpu": gpu, "python": platform.python_version()}


def machine_line(m: dict[str, str]) -> str:
    return f"{m['cpu']}, {m['cores']} cores, {m['ram']} RAM, torch {m['torch']}, {m['gpu']}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def parse_pairs(line: str) -> dict[str, str]:
    return dict(re.findall(r"([A-Za-z_][\w.\-]*)=(\S+)", line))


def run_one(name: str, python: str, timeout_s: float, threads: int | None) -> dict:
    script = HERE / f"{name}.py"
    start = time.perf_counter()
    row = {"script": name, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:  # own process group: a timeout ends the script and anything it started
        proc = subprocess.Popen([python, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", env=child_env(threads), cwd=ROOT, start_new_session=True)
    except OSError as err:
        row.update(status="failed", seconds=time.perf_counter() - start, error=f"could not start: {err}")
        return row
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        last = _last_line(stderr) or _last_line(stdout)
        row.update(status="failed", seconds=time.perf_counter() - start,
                   error=f"timeout after {timeout_s:.0f} s" + (f"; last output: {last}" if last else ""))
        return row
    row["seconds"] = time.perf_counter() - start
    last = _last_line(stdout)
    if proc.returncode != 0:
        row.update(status="failed", error=f"exit {proc.returncode}: {_last_line(stderr) or last or 'no output'}")
        return row
    pairs = parse_pairs(last)
    row.update(status="ok", last_line=last, figures=pairs)
    if not pairs:
        row.update(status="failed", error=f"last line has no key=value pairs: {last or '(no output)'}")
    return row


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: list[dict], this_run: dict, kept_from: dict[str, dict]) -> str:
    """``kept_from``: script -> machine of rows kept from an earlier run."""
    m = this_run["machine"]
    lines = [
        "# Benchmark results",
        "",
        f"- Date: {this_run['date']}",
        f"- Machine: {machine_line(m)} (Python {m['python']})",
        f"- Threads: {this_run['threads']}",
        f"- Command: `{this_run['command']}`",
        "",
        "| script | seconds | headline figures |",
        "|---|---:|---|",
    ]
    for row in rows:
        if row["status"] == "ok":
            figures = " ".join(f"{k}={v}" for k, v in row["figures"].items())
        else:
            figures = f"FAILED: {row.get('error', '')}"
        if row["script"] in kept_from:
            old = kept_from[row["script"]]
            note = f" (kept from the run of {row['date']}"
            if machine_line(old) != machine_line(m):
                note += f" on {machine_line(old)}"
            figures += note + ")"
        lines.append(f"| {_cell(row['script'])} | {row['seconds']:.1f} | {_cell(figures)} |")
    lines += [
        "",
        "Each ratio or share in a row is measured within one run of that script (numerator and denominator",
        "in the same process on the same machine; timed pairs interleaved), so ratios compare across machines",
        "better than the absolute seconds do. Seconds are the wall time of the whole script, start-up included.",
        "",
        f"<!-- {DATA_TAG}: " + json.dumps({"rows": rows}, ensure_ascii=False).replace("--", "-\\u002d") + " -->",
        "",
    ]
    return "\n".join(lines)


def previous_rows() -> dict[str, dict]:
    """Rows of the previous RESULTS.md (from its embedded data), by script name."""
    try:
        text = RESULTS.read_text(encoding="utf-8")
    except OSError:
        return {}
    match = re.search(rf"<!-- {DATA_TAG}: (.*) -->", text)
    if not match:
        return {}
    try:
        return {r["script"]: r for r in json.loads(match.group(1))["rows"]}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}





def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks (name or name.py)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per script (default 600)")
    parser.add_argument("--threads", type=int, default=None,
                        help="set OMP_NUM_THREADS for the scripts (default: unset, the whole machine)")
    args = parser.parse_args(argv)
    if not args.timeout > 0 or (args.threads is not None and args.threads < 1):
        # else every script is recorded as timed out (or runs on OMP_NUM_THREADS=0) and RESULTS.md is overwritten
        parser.error(f"need --timeout > 0 and --threads >= 1, got {args.timeout:g} and {args.threads}")

    available = discover()
    if args.only:
        wanted = [Path(n).stem for n in args.only]
        unknown = [n for n in wanted if n not in available]
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available)}")
        names = list(dict.fromkeys(wanted))
    else:
        names = available

    python = venv_python()
    m = machine(python)
    print(f"machine: {machine_line(m)}", flush=True)
    fresh = {}
    for name in names:
        print(f"running {name} ...", flush=True)
        row = run_one(name, python, args.timeout, args.threads)
        row["machine"] = m
        fresh[name] = row
        status = " ".join(f"{k}={v}" for k, v in row.get("figures", {}).items()) if row["status"] == "ok" else \
            f"FAILED: {row.get('error')}"
        print(f"  {row['seconds']:.1f} s  {status}", flush=True)

    kept = {k: v for k, v in previous_rows().items() if k in available and k not in fresh} if args.only else {}
    rows = [fresh[n] if n in fresh else kept[n] for n in available if n in fresh or n in kept]
    this_run = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": m,
        "threads": f"OMP_NUM_THREADS={args.threads}" if args.threads is not None else
        "OMP_NUM_THREADS unset (all cores)",
        "command": "python benchmarks/run_all.py" + (f" --only {' '.join(names)}" if args.only else "")
        + (f" --threads {args.threads}" if args.threads is not None else ""),
    }
    write_text_atomic(RESULTS, render(rows, this_run, {k: v.get("machine") or m for k, v in kept.items()}))
    failed = [r["script"] for r in fresh.values() if r["status"] != "ok"]
    print(f"wrote {RESULTS}: {len(fresh)} run, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
