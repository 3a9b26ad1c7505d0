"""The culprit inside the kernel body (issue 42): the values a body holds at its peak (the body
account, tpu/body.held_values) put on the lines that make them (VMEM008), splitting the
compiler's internal scratch, or the model's estimate of it without a compile; the rest stays
VMEM003 on the pallas_call.

jax's own flash attention with 4096 blocks on v5e, as the issue found it: windows of 2.00M and
a score block f32[4096,4096] whose exponentials p are live across their row sum. The CLI runs as
a user runs it, and the compiler's total is held to a direct deviceless compile of the same call.
"""

from __future__ import annotations

import importlib.util
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from support import KERNELS
from support.bodies import kernel_jaxpr, on_rows
from support.cli import run_cli, run_json
from support.tiers import EDITOR, starts
from support.tpu_direct import compile_directly

from vmem_lsp.correlate import Anchor
from vmem_lsp.results import CapturedCall, Operand, Origin, Unseen
from vmem_lsp.source.model import Span
from vmem_lsp.tpu.body_parts import Split, assigned_name, body_parts

FLASH = KERNELS / "flash_user.py"
MiB = 1 << 20


def flash_source() -> tuple[str, list[str]]:
    from jax.experimental.pallas.ops.tpu import flash_attention

    path = flash_attention.__file__
    return path, Path(path).read_text().splitlines()


def line_starting(lines: list[str], text: str, after: int = 0) -> int:
    return next(n for n, line in enumerate(lines, 1) if n > after and line.strip().startswith(text))


# ---- the account, read from a traced body ------------------------------------------------------


def kernel_body(kernel):
    return kernel_jaxpr(on_rows(kernel), ((2048, 1024), jnp.float32))


@pytest.mark.fast
def test_each_value_held_at_the_peak_is_on_the_line_that_makes_it():
    from vmem_lsp.tpu.body import large_values

    def softmax_rows(x_ref, o_ref):
        s = jnp.dot(x_ref[...], x_ref[...].T)  # f32[512,512], a dot's result
        p = jnp.exp(s - 1.0)
        o_ref[...] = (p / jnp.sum(p, axis=-1, keepdims=True)) @ x_ref[...]

    lines = Path(__file__).read_text().splitlines()
    made = line_starting(lines, "p = jnp.exp(s - 1.0)")
    held = [u for u in large_values(kernel_body(softmax_rows)) if u.kind == "held"]
    [p] = [u for u in held if u.origin and u.origin.line == made]
    assert p.shape == (512, 512) and p.bytes == MiB
    assert p.what == "f32[512,512] from exp across reduce_sum of dot_general"
    assert p.start is not None and p.start.line == made - 1  # grown from s's dot
    assert p.across is not None and p.across.line == made + 1


@pytest.mark.fast
def test_a_loaded_block_is_not_where_a_value_grew_from():
    from vmem_lsp.tpu.body import large_values

    def rows(x_ref, o_ref):
        x = jnp.exp(x_ref[...])
        o_ref[...] = x / jnp.sum(x, axis=-1, keepdims=True)

    [x] = [u for u in large_values(kernel_body(rows)) if u.kind == "held"]
    assert x.what == "f32[512,1024] from exp across reduce_sum" and x.start is None


@pytest.mark.fast
def test_each_call_of_a_helper_is_a_value_of_its_own_on_its_own_line():
    """jax traces jnp.where once and calls the same jaxpr again: its variables recur in every
    call. An unrolled loop's masked copies (a router's groups) are values of their own, each on
    the line of its call, not one value on the first call's line."""
    from vmem_lsp.tpu.body import large_values

    def two_masks(x_ref, o_ref):
        x = jnp.exp(x_ref[...])
        low = jnp.where(x > 1.0, x, 0.0)
        high = jnp.where(x > 2.0, x, 0.0)
        total = jnp.sum(x, axis=-1, keepdims=True)
        o_ref[...] = (low + high) / total

    lines = Path(__file__).read_text().splitlines()
    low, high = line_starting(lines, "low = jnp.where("), line_starting(lines, "high = jnp.where(")
    held = [u for u in large_values(kernel_body(two_masks)) if u.kind == "held"]
    masks = sorted(u.origin.line for u in held if u.what.startswith("f32[512,1024] from select_n") and u.origin)
    assert masks == [low, high]


@pytest.mark.fast
def test_an_unrolled_chain_s_steps_are_one_value_of_the_kept_account_on_its_line():
    """A top-k that collects each pick's column into a slot array, and sums the picks: the account
    of a chip that keeps every step (v4, v5e, v5p) holds each chain's steps as one value on its line; the
    plain account (v6e, v7x) holds one. A chain masked with a constant (the candidates) and an int32
    chain (the picks' indices: measured to spill nothing) are not kept."""
    from vmem_lsp.tpu import layout
    from vmem_lsp.tpu.body import kept_values, large_values

    def top4(x_ref, o_ref):
        x = x_ref[...]
        slot = jax.lax.broadcasted_iota(jnp.int32, (512, 128), 1)
        column = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
        picked, at = jnp.zeros((512, 128), jnp.float32), jnp.zeros((512, 128), jnp.int32)
        total = jnp.zeros((512, 1), jnp.float32)
        for j in range(4):
            best = jnp.max(x, axis=-1, keepdims=True)
            where = jnp.min(jnp.where(x == best, column, 1024), axis=-1, keepdims=True)
            picked = jnp.where(slot == j, best, picked)  # é: the steps kept
            total = total + best  # a sum of the picks: kept as well
            at = jnp.where(slot == j, where, at)
            x = jnp.where(column == where, -1e30, x)
        o_ref[...] = x  # x and column live to the end: the peak is across the last pick's min
        o_ref[:, :128] = picked + at.astype(jnp.float32) + total

    lines = Path(__file__).read_text().splitlines()
    update = line_starting(lines, "picked = jnp.where(slot == j, best, picked)")
    body = kernel_body(top4)
    unseen = (*large_values(body), *kept_values(body))
    kept = [u for u in unseen if u.kind == "kept"]
    [steps] = [u for u in kept if u.origin and u.origin.line == update]
    # across the last pick's min: the three steps before it, each a whole f32[512,128] (the column padded)
    assert steps.what == "3 x f32[512,128] from select_n across reduce_min" and steps.bytes == 3 * 512 * 128 * 4
    assert steps.across is not None and steps.across.line == update - 1
    [summed] = [u for u in kept if u.origin and u.origin.line == update + 1]
    assert summed.what == "3 x f32[512,1] from add across reduce_min" and summed.bytes == 3 * 512 * 128 * 4
    assert not [u for u in kept if " x s32" in u.what or " x f32[512,1024]" in u.what]
    assert all(" x " not in u.what for u in unseen if u.kind == "held")
    assert sum(u.bytes for u in kept) > sum(u.bytes for u in unseen if u.kind == "held")
    call = replace(call_holding(), unseen=unseen)
    assert [layout.account_kind(call, t) for t in ("v4", "v5e", "v5p", "v6e", "v7x")] == ["kept"] * 3 + ["held"] * 2


@pytest.mark.fast
def test_a_body_account_that_fails_leaves_the_other_and_is_counted(monkeypatch, capsys):
    """The kept account is an analysis of its own: a bug in it is said and counted (the worker's
    extra), and the staged values and the plain account still reach the check."""
    from vmem_lsp.compile import tracing
    from vmem_lsp.compile.tracing import pallas_equations
    from vmem_lsp.tpu import worker

    def rows(x_ref, o_ref):
        x = jnp.exp(x_ref[...])
        o_ref[...] = x / jnp.sum(x, axis=-1, keepdims=True)

    def broken(jaxpr):
        raise IndexError("planted")

    monkeypatch.setattr(worker, "kept_values", broken)
    failures = tracing.EXTRA_FAILURES[0]
    x = jax.ShapeDtypeStruct((2048, 1024), jnp.float32)
    [eqn] = pallas_equations(jax.make_jaxpr(on_rows(rows))(x).jaxpr)
    unseen = worker.call_facts(eqn)["unseen"]
    assert {u.kind for u in unseen} >= {"live", "held"}
    assert tracing.EXTRA_FAILURES[0] == failures + 1 and "internal error in broken" in capsys.readouterr().err


# ---- the split, on data ------------------------------------------------------------------------


class Texts:
    def __init__(self, texts: dict[str, str]):
        self.texts = texts

    def sites_of(self, path):
        raise AssertionError("no site is read without a BlockSpec")

    def text(self, path):
        return self.texts.get(path)


def call_holding(*values: tuple[int, int]) -> CapturedCall:
    """A kernel with one f32[512,1024] input window of a [4096,1024] array whose body holds
    values of (bytes, line) in k.py."""
    held = tuple(
        Unseen("f32[512,512] from exp across reduce_sum", size, Origin("k.py", line), "held", (512, 512))
        for size, line in values
    )
    op = Operand("in", 0, 0, "f32", (4096, 1024), (512, 1024), None, Origin("k.py", 1), False, None)
    return CapturedCall("k", None, None, (8,), 0, (op,), (), None, False, None, 0.0, unseen=held)


@pytest.mark.fast
def test_the_split_never_claims_more_than_the_figure_it_splits():
    texts = Texts({"k.py": "x\n    s = dot(a, b)\n    p = jnp.exp(s)  # é\n    q += p\n"})
    anchor = Anchor("k.py", Span(9, 0, 9, 4))
    call = call_holding((64 * MiB, 3), (8 * MiB, 4), (MiB // 2, 2))
    base = {"used": 100 * MiB}
    parts = body_parts(call, Split(70 * MiB), "v6e", None, texts, anchor, "need", base, estimated=False)
    assert [p.code for p in parts] == ["VMEM008", "VMEM003"]  # 8M would pass 70M; 0.5M is under 5% of 100M
    [p, rest] = parts
    assert p.facts["size"] + rest.facts["size"] == 70 * MiB
    assert p.wording.head.startswith("p f32[512,512] = 64.00M") and "(p)" in rest.wording.head
    assert p.where.span == Span(3, 4, 3, len("    p = jnp.exp(s)  # é"))  # code points, not bytes
    # a value larger than the whole figure is not in it (the compiler streams it): the next one is
    assert [
        b.facts["size"]
        for b in body_parts(call, Split(32 * MiB), "v6e", None, texts, anchor, "need", base, estimated=False)
    ] == [
        8 * MiB,
        24 * MiB,
    ]
    assert body_parts(call, Split(4 * MiB), "v6e", None, texts, anchor, "need", base, estimated=False) == []
    # a figure smaller than every value it could be, but not small: the largest takes all of it, said so
    [partial] = body_parts(
        call, Split(6 * MiB, "spill slots"), "v6e", None, texts, anchor, "need", base, estimated=False
    )
    assert partial.facts["size"] == 6 * MiB and partial.facts["value_bytes"] == 64 * MiB
    assert (
        partial.wording.head.startswith("p f32[512,512] = 64.00M")
        and "(spill slots 6.00M is less" in partial.wording.head
    )
    estimated = body_parts(call, Split(72 * MiB), "v6e", None, texts, anchor, "need", base, estimated=True)
    assert [e.facts["size"] for e in estimated] == [64 * MiB, 8 * MiB]
    assert all("~" in e.wording.head for e in estimated)


@pytest.mark.fast
def test_the_name_of_a_value_is_what_its_line_assigns():
    assert assigned_name("      p = jnp.exp(s)") == "p"
    assert assigned_name("  s *= sm_scale") == "s"
    assert assigned_name("  o_ref[...] = p") is None
    assert assigned_name("  if a == b:") is None


# ---- jax's flash attention, as a user checks it --------------------------------------------------


def direct_total(target: str) -> str:
    """The compiler's own words on the flash_user.py example, compiled directly: jitted whole
    for the chip's deviceless topology, no vmem-lsp in the way."""
    return compile_directly(
        target,
        """
        from jax.experimental.pallas.ops.tpu.flash_attention import flash_attention, BlockSizes
        q = jax.ShapeDtypeStruct((1, 8, 8192, 128), jnp.bfloat16, sharding=sharding)
        sizes = BlockSizes(block_q=4096, block_k_major=4096, block_k=4096, block_b=1)
        run, args = (lambda q, k, v: flash_attention(q, k, v, block_sizes=sizes)), (q, q, q)
        """,
    )


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("flash")
    (work / FLASH.name).write_text(FLASH.read_text())
    done, report = run_json("check", FLASH.name, "--target", "v5e", "--no-cache", cwd=work)
    assert done.returncode == 1, done.stderr
    return report


def test_the_scores_exponentials_are_an_error_on_their_line_with_the_compilers_figures(compiled):
    path, lines = flash_source()
    body = [d for d in compiled["diagnostics"] if d["code"] == "VMEM008"]
    [p] = body
    made = int(p["range"]["start_line"])
    assert p["abs_path"] == path and lines[made - 1].strip().startswith("p = jnp.exp(")
    scores = line_starting(lines, "s = jax.lax.dot_general(", after=made - 60)
    assert p["message"].startswith(
        f"p f32[4096,4096] = 64.00M, a value of the kernel body, grown from the dot at line {scores}"
    )
    assert p["origin"] == "compiler" and p["facts"]["estimated"] is False
    # related to the block sizes it grows with: the BlockSpecs of q, k and v
    grows = [r for r in p["related"] if "grows with" in r["message"]]
    assert {r["message"].split(" grows with ")[1].split("'")[0] for r in grows} >= {"input 0", "input 1"}
    # the split reconciles to the compiler's total: windows + body values + the rest
    [total] = [d for d in compiled["diagnostics"] if d["code"] == "VMEM002"]
    [rest] = [d for d in compiled["diagnostics"] if d["code"] == "VMEM003"]
    windows = [r for r in total["related"] if " window " in r["message"] or "scratch " in r["message"][:12]]
    assert p["facts"]["size"] + rest["facts"]["size"] + 2 * MiB * len(windows) == total["facts"]["used"]
    # the small windows are related information, not errors: the body makes this overflow
    assert not [d for d in compiled["diagnostics"] if d["code"] == "VMEM001"]
    # the compiler's figure is the one a direct compile of the same call gives
    direct = direct_total("v5e")
    assert "81.36M" in direct and "16.00M" in direct, direct[:2000]
    assert "81.36M of 16.00M" in total["message"]


def test_a_reports_spill_slots_are_split_into_the_bodys_values(tmp_path):
    """v5p lists the kernel's allocations (the breakdown form) rather than a total: the body's p
    is 64.00M of its 67.35M of register allocator spill slots, on p's line; the rest stays spill
    slots on the pallas_call, as the direct compile of the same call lists them."""
    (tmp_path / FLASH.name).write_text(FLASH.read_text())
    done, report = run_json("check", FLASH.name, "--target", "v5p", "--no-cache", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    path, lines = flash_source()
    [p] = [d for d in report["diagnostics"] if d["code"] == "VMEM008"]
    assert p["abs_path"] == path and lines[p["range"]["start_line"] - 1].strip().startswith("p = jnp.exp(")
    assert p["message"].startswith("p f32[4096,4096] = 64.00M") and p["facts"]["form"] != "scoped"
    [total] = [d for d in report["diagnostics"] if d["code"] == "VMEM002"]
    [rest] = [r["message"] for r in total["related"] if "spill slots" in r["message"]]
    assert rest.startswith("register allocator spill slots ~ 3.35M besides the kernel body's values (p)")
    direct = direct_total("v5p")
    assert "81.35M" in direct and "spill slots" in direct and "67.35M" in direct, direct[:3000]
    # the same report in a job's log: explain halves the dimension the windows tile (block_q's, not
    # the leading 1), and says the spill slots are the body's values
    from vmem_lsp.explain import explain_json, find_reports

    [found] = find_reports(direct.splitlines())
    ways = explain_json(found, "v5p")["ways_out"]
    assert "halving input 0's block (4096 → 2048 rows) saves 1.00M: not enough alone, 16.41M short" in ways
    assert any(w.startswith("the register spills (67.35M) are the kernel body's values") for w in ways)
    # and with --source, placed where check puts it: the pallas_call is jax's, so the verdict is
    # on the user's example (VMEM004), the total on jax's pallas_call line, as check's
    (tmp_path / "job.log").write_text("".join(f"E1204 train.py:88] {line}\n" for line in direct.splitlines()))
    done, placed = run_json("explain", "job.log", "--target", "v5p", "--source", FLASH.name, cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # errors placed, as check exits
    on = lambda found, code: {(d["abs_path"], d["range"]["start_line"]) for d in found if d["code"] == code}
    assert (
        on(placed["diagnostics"], "VMEM002")
        == on(report["diagnostics"], "VMEM002")
        == {(path, total["range"]["start_line"])}
    )
    [verdict] = [d for d in placed["diagnostics"] if d["code"] == "VMEM004"]
    assert (verdict["path"], verdict["range"]["start_line"]) == (FLASH.name, 3)
    assert verdict["message"].startswith("_flash_attention_kernel (") and "81.35M of 63.94M" in verdict["message"]


ROUTER = KERNELS / "router_topk.py"


def test_the_routers_kept_steps_are_an_error_on_their_line_within_a_quarter_of_the_compiler(tmp_path):
    """A DeepSeek-style grouped top-k on v5e (done-when 2): v5e keeps each step of the unrolled
    group loop's `group_scores = jnp.where(lane == g, ...)`, an error on that line; the chip's body
    account is within 25% of the compiler's internal scratch (its total, a direct compile's, less
    the windows), where the account of a chip that updates in place falls short of it."""
    from vmem_lsp.tpu.body import kept_values, large_values

    done, report = run_json("check", ROUTER.name, "--target", "v5e", "--cache-dir", str(tmp_path), cwd=KERNELS)
    assert done.returncode == 1, done.stderr
    [total] = [d for d in report["diagnostics"] if d["code"] == "VMEM002"]
    body = [d for d in report["diagnostics"] if d["code"] == "VMEM008"]
    [rest] = [d for d in report["diagnostics"] if d["code"] == "VMEM003"]
    [steps] = [d for d in body if "steps of an unrolled loop" in d["message"]]
    lines = ROUTER.read_text().splitlines()
    assert lines[steps["range"]["start_line"] - 1].strip().startswith("group_scores = jnp.where(lane == g,")
    assert steps["message"].startswith("group_scores f32[1024,128] = 3.50M, 7 steps of an unrolled loop")
    assert steps["facts"]["copies"] == 7
    internal = sum(d["facts"]["size"] for d in [*body, rest])

    spec = importlib.util.spec_from_file_location("router_topk", ROUTER)
    assert spec is not None and spec.loader is not None
    router = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(router)
    shapes = ((4096, 2048), jnp.bfloat16), ((2048, 256), jnp.bfloat16), ((1, 256), jnp.float32)
    body = kernel_jaxpr(router.route, *shapes)
    unseen = (*large_values(body), *kept_values(body))
    kept, plain = (sum(u.bytes for u in unseen if u.kind == kind) for kind in ("kept", "held"))
    assert abs(kept / internal - 1) <= 0.25, (kept, internal)
    assert plain / internal < 0.75, (plain, internal)  # the account before v5e's steps were kept

    direct = compile_directly(
        "v5e",
        """
        x = jax.ShapeDtypeStruct((4096, 2048), jnp.bfloat16, sharding=sharding)
        w = jax.ShapeDtypeStruct((2048, 256), jnp.bfloat16, sharding=sharding)
        b = jax.ShapeDtypeStruct((1, 256), jnp.float32, sharding=sharding)
        run, args = router_topk.route, (x, w, b)
        jax.config.update("jax_default_device", device)  # Pallas reads the chip from the default device
        """,
        {"router_topk": ROUTER},
    )
    used = total["message"].split("needs ")[1].split(" of ")[0]
    assert f"{used} of 16.00M" in direct or f"size {used}" in direct, direct[:2000]


def test_without_a_compile_the_model_puts_the_same_value_on_the_same_line(tmp_path):
    (tmp_path / FLASH.name).write_text(FLASH.read_text())
    done, report = run_json("check", FLASH.name, "--target", "v5e", "--no-cache", "--no-compile", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    path, lines = flash_source()
    [p] = [d for d in report["diagnostics"] if d["code"] == "VMEM008"]
    assert p["abs_path"] == path and lines[p["range"]["start_line"] - 1].strip().startswith("p = jnp.exp(")
    assert p["message"].startswith("p f32[4096,4096] ~ 64.00M") and p["origin"] == "model"
    assert "not compiled" in p["message"]


# ---- a kernel whose overflow is all body values, in the editor -------------------------------------

SCORES = KERNELS / "body_scores.py"


@starts(EDITOR)
@asynccontextmanager
async def opened_on_v5e_and_v6e(tmp_path: Path, kernel: Path):
    """A copy of `kernel` open in the real language server, in a workspace that checks v5e and v6e:
    (client, editor)."""
    from support.lsp_client import Editor, running_server

    (tmp_path / "pyproject.toml").write_text('[tool.vmem-lsp]\ntargets = ["v5e", "v6e"]\ncache-dir = ".cache"\n')
    path = tmp_path / kernel.name
    path.write_text(kernel.read_text())
    async with running_server(tmp_path) as client:
        editor = Editor(client, path)
        editor.open()
        yield client, editor


@pytest.mark.asyncio
async def test_in_the_editor_the_body_line_is_the_error_and_its_hover_shows_the_peak(tmp_path):
    """tests/data/kernels/body_scores.py on v5e and v6e through the real language server: the
    scores' line is the one error beside the kernel's total and the example (its windows, 1.00M
    each, are related information), its range counted in UTF-16 at the edge (an astral comment),
    and a hover on it shows the body's values at their peak."""
    from lsprotocol import types
    from support.lsp_client import compiler_tier, lsp_lines, utf16_columns, wait_for

    lines = lsp_lines(SCORES.read_text())
    scores = line_starting(lines, "s = jax.lax.dot_general(") - 1
    async with opened_on_v5e_and_v6e(tmp_path, SCORES) as (client, editor):
        found = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM008"] and editor.diagnostics(),
            what="the body's error after open",
        )
        assert {d.code for d in found if d.severity == types.DiagnosticSeverity.Error} == {
            "VMEM008",
            "VMEM002",
            "VMEM004",
        }
        [body] = [d for d in found if d.code == "VMEM008"]
        line = lines[scores]
        indent = len(line) - len(line.lstrip())
        assert body.range == types.Range(
            types.Position(scores, indent), types.Position(scores, utf16_columns(line)[-1])
        )
        assert body.message.startswith("s f32[2048,4096] = 32.00M, a value of the kernel body")
        assert "TPU v5e" in body.message or "v5e" in body.message
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(editor.uri), types.Position(scores, indent + 2))
        )
        assert hover is not None
        assert "kernel body at its peak" in hover.contents.value
        assert "**f32[2048,4096] from dot_general**" in hover.contents.value


@pytest.mark.asyncio
async def test_in_the_editor_a_chip_that_keeps_the_steps_has_its_own_account_in_the_hover(tmp_path):
    """router_topk.py on v5e and v6e through the real language server: the group loop's update is
    an error on v5e (which keeps each step), and a hover on it shows each chip's account: v5e's
    with the seven steps in bold, v6e's without them."""
    from lsprotocol import types
    from support.lsp_client import compiler_tier, lsp_lines, wait_for

    lines = lsp_lines(ROUTER.read_text())
    update = line_starting(lines, "group_scores = jnp.where(lane == g,") - 1
    async with opened_on_v5e_and_v6e(tmp_path, ROUTER) as (client, editor):
        found = await wait_for(
            lambda: [d for d in compiler_tier(editor.diagnostics()) if d.code == "VMEM008"],
            what="the kept steps' error after open",
        )
        assert [d.range.start.line for d in found] == [update]
        assert "7 steps of an unrolled loop" in found[0].message and "TPU v5e" in found[0].message
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(editor.uri), types.Position(update, 12))
        )
        assert hover is not None
        text = hover.contents.value
        v5e, v6e = (
            text.index("kernel body at its peak** on TPU v5e"),
            text.index("kernel body at its peak** on TPU v6e"),
        )
        assert (
            "**7 x f32[1024,128] from select_n**" in text[v5e:]
            and "7 x f32" not in text[v6e : v5e if v6e < v5e else None]
        )


# ---- the fix search shrinks what the body grows with ------------------------------------------------

TABLE = KERNELS / "body_and_table.py"


def table_direct(block: int, table_rows: int) -> str:
    """body_and_table.py's call compiled directly for v5e with these block sizes."""
    return compile_directly(
        "v5e",
        f"""
        run = lambda q, k, t: table.scores_with_table(q, k, t, block={block}, table_rows={table_rows})
        shapes = [(4096, 128), (4096, 128), (8192, 128)]
        args = tuple(jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding) for s in shapes)
        """,
        modules={"table": TABLE},
    )


def test_the_fix_search_shrinks_the_block_the_body_grows_with_first(tmp_path):
    """body_and_table.py: the body's f32[2048,4096] scores overflow v5e; the table's window has a
    knob of its own. Scaling the compiler's internal scratch with every knob halved, the model took
    block=1024 with table_rows=4096 for a fit and the search spent a compile on it (the compiler
    refuses it); the body account knows the table leaves the body as it was, so the first compile
    is the block the scores grow with, and the fix says why that knob."""
    (tmp_path / TABLE.name).write_text(TABLE.read_text())
    done = run_cli("check", TABLE.name, "--target", "v5e", "--no-cache", "--diff", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    [said] = [line for line in done.stderr.splitlines() if "would fix" in line]  # the diff is stdout
    assert "Shrink blocks: block=512 (in the example), which shrinks what the kernel body holds" in said
    assert "compiler-verified" in said and said.endswith("[1 compiles]"), said
    assert "+# vmem: scores_with_table(bf16[4096, 128], bf16[4096, 128], bf16[8192, 128], block=512)" in done.stdout
    # the compiler, directly: the fix fits, the old first try does not
    assert table_direct(512, 8192).strip() == "fits"
    refused = table_direct(1024, 4096)
    assert "vmem" in refused.lower() and "fits" != refused.strip(), refused[:2000]


@pytest.mark.fast
def test_a_knob_that_moves_only_windows_leaves_the_bodys_scratch_as_it_was():
    from vmem_lsp.tpu.fixes import body_scale

    def call(*held: int) -> CapturedCall:
        values = tuple(Unseen("f32", 4 * rows * 4096, None, "held", (rows, 4096)) for rows in held)
        return CapturedCall("k", None, None, (2,), 0, (), (), None, False, None, 0.0, unseen=values)

    assert body_scale(call(2048), call(2048), 0.25) == 1.0  # a table's knob halved twice: the body the same
    assert body_scale(call(2048, 2048), call(512, 512), 1 / 16) == 0.25  # the body scales as its values did
    assert body_scale(call(), call(512), 0.5) == 0.5  # no body account: the product of the knobs' ratios
