"""CUDA commands that need no server: `compile` (one candidate's source, cubin and metadata)
and `check` (random candidates verified against the reference, on the GPU or, with
`--emulate`, on the CPU through the CUDA emulator)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tunehub.client.commands.common import (
    InternalError,
    UserError,
    one_line,
    parse_symbols,
    parse_target,
    read_signature,
    seconds,
    symbol_option,
)

if TYPE_CHECKING:
    from tunehub.compiler.ir import Program
    from tunehub.compiler.space import ProgramSpace
    from tunehub.schemas.target import Target

_ARCH_HELP = "CUDA architecture: sm_80, sm_90, ..."
# Distinct configs drawn per sample asked for, at most, before `check` settles for fewer.
_DRAWS_PER_SAMPLE = 20


@click.command("compile")
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", type=click.Choice(["cuda"]), default="cuda", show_default=True)
@click.option("--arch", default="sm_90", show_default=True, help=_ARCH_HELP)
@click.option(
    "--config", "config_text", help="Schedule config, a JSON object (default: the space's default)."
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory to write kernel.cu, kernel.cubin and metadata.json into.",
)
@click.option(
    "--seed",
    "seed_index",
    type=click.IntRange(min=0),
    help="Compile the space's seed of this index (0: the first) instead of a config.",
)
@symbol_option("With --seed: the seeds of a tuning measured at this symbol value.")
@click.option("--ptx", is_flag=True, help="Also write the PTX (kernel.ptx).")
def compile_command(
    signature_file: Path,
    target: str,
    arch: str,
    config_text: str | None,
    out_dir: Path,
    seed_index: int | None,
    symbol_args: tuple[str, ...],
    ptx: bool,
) -> None:
    """Compile one candidate of a signature with nvcc; print its kernels' resource usage."""
    from tunehub.compiler.canonical import workload_key
    from tunehub.compiler.lower import lower
    from tunehub.schemas.record import RecordStatus
    from tunehub.targets.cuda.build import CudaBuilder

    program = _program(signature_file)
    cuda, space = _space(program, arch)
    if seed_index is None:
        if symbol_args:
            raise UserError("--symbol picks the seeds: give it with --seed")
        config = _config(space, config_text)
    else:
        if config_text is not None:
            raise UserError("give --config or --seed, not both")
        symbols = _symbols(program, parse_symbols(symbol_args)) if symbol_args else {}
        seeds = space.seeds(symbols)
        if seed_index >= len(seeds):
            raise UserError(f"--seed {seed_index}: the space has {len(seeds)} seeds")
        config = seeds[seed_index]
    kernel = lower(program, cuda, config)
    built = CudaBuilder(emit_ptx=ptx).build(kernel, cuda, timeout_s=600)
    if built.status is not RecordStatus.OK or built.artifact is None:
        raise InternalError(f"nvcc failed ({built.status}): {built.log[-2000:]}")
    stats = {k: v for k, v in built.stats.items() if k != "ptx"}
    metadata = {
        **kernel.metadata(),
        "name": program.name,
        "workload_key": workload_key(program),
        "target": str(cuda),
        "config": config,
        "build": stats,
        "sha256": built.sha256,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel.cu").write_text(kernel.source)
    (out_dir / "kernel.cubin").write_bytes(built.artifact)
    (out_dir / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    files = ["kernel.cu", "kernel.cubin", "metadata.json"]
    if ptx:
        (out_dir / "kernel.ptx").write_text(built.stats["ptx"])
        files.append("kernel.ptx")
    click.echo(f"wrote {out_dir}/ ({', '.join(files)}): {program.name} for {cuda}")
    for launch in kernel.launch["kernels"]:
        usage = stats["kernels"].get(launch["entry"], {})
        click.echo(f"  {launch['entry']}: {_resources(launch, usage)}")


@click.command()
@click.argument("signature_file", type=click.Path(path_type=Path))
@click.option("--target", type=click.Choice(["cuda"]), default="cuda", show_default=True)
@click.option("--arch", default="sm_90", show_default=True, help=_ARCH_HELP)
@click.option("--emulate", is_flag=True, help="Run on the CPU through the CUDA emulator.")
@click.option("--samples", type=click.IntRange(min=1), default=4, show_default=True)
@symbol_option("Symbol value to check at (default: each symbol at 64, clamped).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling.")
@click.option(
    "--config",
    "config_texts",
    multiple=True,
    help="A config to check, a JSON object (repeatable); given, nothing is sampled.",
)
@click.pass_context
def check(
    ctx: click.Context,
    signature_file: Path,
    target: str,
    arch: str,
    emulate: bool,
    samples: int,
    symbol_args: tuple[str, ...],
    seed: int,
    config_texts: tuple[str, ...],
) -> None:
    """Verify random valid candidates (or the named ones) against the reference; exit 1 if
    any fails."""
    from tunehub.targets.cuda import device
    from tunehub.targets.cuda.check import check_configs

    program = _program(signature_file)
    cuda, space = _space(program, arch)
    symbols = _symbols(program, parse_symbols(symbol_args))
    if not emulate and device.gpu_for(arch) is None:
        raise UserError(f"no GPU here runs {arch} code (GPUs: {device.gpu_archs()}): use --emulate")
    configs = [_config(space, text) for text in config_texts] or _sample(space, samples, seed)
    where = "emulated" if emulate else "on the GPU"
    values = ", ".join(f"{k}={v}" for k, v in symbols.items()) or "no symbols"
    click.echo(f"{program.name} on {cuda} ({where}, {values}): {len(configs)} candidates")
    results = check_configs(program, cuda, configs, symbols, emulate=emulate)
    for n, result in enumerate(results):
        status = str(result.status)
        if status == "ok":
            detail = f"max err {result.max_error:.3g}" if result.max_error is not None else ""
        else:
            detail = one_line(result.log)[:300]
        timing = f"build {seconds(result.build_s)}, run {seconds(result.run_s)}"
        click.echo(f"#{n} {status:<14} {detail}  ({timing})  {json.dumps(result.config)}")
    passed = sum(str(r.status) == "ok" for r in results)
    click.echo(f"{passed} of {len(results)} passed")
    if passed < len(results):
        ctx.exit(1)


COMMANDS = [compile_command, check]


def _program(path: Path) -> Program:
    from tunehub.compiler.errors import SignatureError
    from tunehub.compiler.program import load

    try:
        return load(read_signature(path))
    except SignatureError as exc:
        raise UserError(f"{path}: {exc}") from exc


def _space(program: Program, arch: str) -> tuple[Target, ProgramSpace]:
    from tunehub.compiler.space import space_for

    cuda = parse_target(f"cuda:{arch}")
    return cuda, space_for(program, cuda)


def _config(space: ProgramSpace, text: str | None) -> dict[str, Any]:
    if text is None:
        return space.default()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--config is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise UserError("--config must be a JSON object of knob values")
    reason = space.check(config)
    if reason is not None:
        raise UserError(f"invalid config: {reason}")
    return config


def _symbols(program: Program, given: dict[str, int]) -> dict[str, int]:
    """Every symbol's value: as given, else 64 clamped to its range (as a tuning does)."""
    declared = {s.name: s for s in program.symbols}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UserError(
            f"unknown symbol {', '.join(unknown)} (declared: {', '.join(declared) or 'none'})"
        )
    values = {}
    for name, symbol in declared.items():
        value = given.get(name, min(max(64, symbol.min), symbol.max))
        if not symbol.min <= value <= symbol.max:
            raise UserError(f"{name}={value} is outside its range [{symbol.min}, {symbol.max}]")
        values[name] = value
    return values


def _sample(space: ProgramSpace, samples: int, seed: int) -> list[dict[str, Any]]:
    """Up to `samples` distinct valid configs, drawn uniformly."""
    rng = random.Random(seed)
    found: dict[str, dict[str, Any]] = {}
    for _ in range(samples * _DRAWS_PER_SAMPLE):
        config = space.sample(rng)
        found.setdefault(space.key(config), config)
        if len(found) == samples:
            break
    return list(found.values())


def _resources(launch: dict[str, Any], usage: dict[str, int]) -> str:
    shape = f"grid [{', '.join(launch['grid'])}] x block {launch['block']}"
    if not usage:
        return shape
    shared = usage.get("shared_bytes", 0) + launch["shared_bytes"]
    spills = usage.get("spill_store_bytes", 0) + usage.get("spill_load_bytes", 0)
    return (
        f"{shape}, {usage.get('registers', '?')} registers, {shared} B shared, "
        f"{usage.get('stack_bytes', 0)} B stack, {spills} B spilled"
    )
