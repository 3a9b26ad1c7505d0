"""A third hardware family, made from the tests alone (issue 40): the one interface
(vmem_lsp/family.py) is all the core asks, so a family it has never seen checks, shows in the
editor, gets a fix and sweeps without a line of the core changed. docs/adding-a-family.md
follows it step by step.

The "fakechip" has a toy compiler (fake_family_worker.py): it refuses any block of more than
BLOCK_LIMIT bytes, in words of its own ("FAKECC: ..."). It compiles only kernels that name no
other platform in their compiler params. Registered in every process vmem-lsp starts by
VMEM_LSP_FAMILIES=support.fake_family (tests/ on PYTHONPATH), or in this one with
families.register(FAMILY)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from vmem_lsp import render
from vmem_lsp.budget import Budget, KnownKernel, Part, edited_operand, headroom_warning, overflow_estimate
from vmem_lsp.correlate import Anchor, call_anchor, kernel_label, kernel_site, spec_anchor
from vmem_lsp.diagnostics import Diagnostic, Related, Subject
from vmem_lsp.dtypes import ITEM_BITS
from vmem_lsp.family import Family, SweepSize
from vmem_lsp.fixes.search import key
from vmem_lsp.render import Wording
from vmem_lsp.results import CapturedCall, Operand
from vmem_lsp.sweep.decide import Verdict, error_verdict

TARGET = "fakechip"
BLOCK_LIMIT = 64 * 1024  # bytes a fakechip block may hold
# The toy compiler's refusal: "FAKECC: input 0 block f32[256,128] is 131072 bytes; fakechip holds 65536".
REFUSAL = re.compile(r"FAKECC: (input|output) (\d+) block (\w+)\[([\d,]*)\] is (\d+) bytes; fakechip holds (\d+)")


def block_bytes(op: Operand) -> int:
    shape = op.block_shape if op.block_shape is not None else op.full_shape
    return math.prod(d or 1 for d in shape) * ITEM_BITS.get(op.dtype, 32) // 8


def blocks(call: CapturedCall) -> list[Operand]:
    return [op for op in call.operands if op.role in ("in", "out")]


def refusals(text: str | None) -> list[tuple[str, int, int]]:
    """(role, index, bytes) of each block the toy compiler refused."""
    return [("in" if m[1] == "input" else "out", int(m[2]), int(m[5])) for m in REFUSAL.finditer(text or "")]


def budget_of(call: CapturedCall, target: str, source: str, fits: bool) -> Budget:
    parts = tuple(
        Part(
            "input_window" if op.role == "in" else "output_window",
            op.index,
            f"{'input' if op.role == 'in' else 'output'} {op.index} block {op.dtype}[{','.join(map(str, op.block_shape or op.full_shape))}]",
            block_bytes(op),
            None,
            True,
        )
        for op in blocks(call)
    )
    largest = max((p.bytes for p in parts), default=0)
    return Budget(target, parts, largest, BLOCK_LIMIT, "shared", BLOCK_LIMIT, source, fits, "Fake Chip", "block memory")


class FakeFamily(Family):
    name = "fake"
    platform = "fake"
    noun = "fake"
    compiler = "FAKECC"
    space = "block memory"
    kernel_words = "a fake kernel"
    params_modules = ("fakecc",)
    worker_module = "support.fake_family_worker"
    space_in_fix_titles = True

    def targets(self) -> tuple[str, ...]:
        return (TARGET,)

    def canonical(self, text: str) -> str | None:
        return TARGET if text.strip().lower() == TARGET else None

    def label(self, target: str) -> str:
        return "Fake Chip"

    def diagnostics(self, example, result, sources) -> list[Diagnostic]:
        """VMEM001 on each refused block's BlockSpec, VMEM002 on the pallas_call, in the toy
        compiler's own figures; VMEM007 for a kernel it compiles."""
        found = []
        for number, call in enumerate(result.calls):
            if call.other_platform:
                continue
            site = kernel_site(call, sources.sites_of)
            anchor = call_anchor(call, site, Anchor(example.path, example.span))
            related = (Related(example.path, example.span, f"example {example.text}"),)
            if call.fits:
                wording = Wording(f"{kernel_label(call)} compiles", "; on ", "Fake Chip")
                subject = Subject(example.key, number, "fits")
                found.append(
                    Diagnostic(
                        anchor.path,
                        anchor.span,
                        "information",
                        "VMEM007",
                        wording.text(),
                        result.target,
                        "compiler",
                        related,
                        {"fits": True},
                        subject,
                        wording,
                    )
                )
                continue
            said = refusals(call.compiler_text)
            whole = Wording(
                f"pallas_call {kernel_label(call)}: FAKECC refuses {len(said)} block(s)",
                "; ",
                f"{render.size(BLOCK_LIMIT)} a block on Fake Chip",
            )
            found.append(
                Diagnostic(
                    anchor.path,
                    anchor.span,
                    "error",
                    "VMEM002",
                    whole.text(),
                    result.target,
                    "compiler",
                    related,
                    {"text": call.compiler_text},
                    Subject(example.key, number, "kernel"),
                    whole,
                )
            )
            for role, index, size in said:
                op = next(o for o in call.operands if o.role == role and o.index == index)
                where = spec_anchor(op, site, sources.sites_of, anchor)
                part = Wording(
                    f"{'input' if role == 'in' else 'output'} {index} block = {render.size(size)}, over FAKECC's limit",
                    "; ",
                    f"{render.size(BLOCK_LIMIT)} a block on Fake Chip",
                )
                found.append(
                    Diagnostic(
                        where.path,
                        where.span,
                        "error",
                        "VMEM001",
                        part.text(),
                        result.target,
                        "compiler",
                        (Related(anchor.path, anchor.span, "pallas_call"),),
                        {"size": size},
                        Subject(example.key, number, f"{role} {index}"),
                        part,
                    )
                )
        return found

    def learn(self, call, result, state):
        return budget_of(call, result.target, "compiler", call.fits), True

    def estimate(self, site, known: KnownKernel, target: str, headroom: float):
        if "fake" not in known.learned:
            return None, []
        call = known.call
        edited = CapturedCall(
            **{**vars(call), "operands": tuple(edited_operand(op, site, known) for op in call.operands)}
        )
        b = budget_of(edited, target, "model", True)
        b = Budget(**{**vars(b), "fits": b.total <= b.limit})
        if b.fits:
            return b, [headroom_warning(site, b, estimated=True)] if b.headroom() < headroom else []
        over = [p for p in b.parts if p.bytes > BLOCK_LIMIT]
        return b, overflow_estimate(site, known, b, over, ("VMEM001", "VMEM002"))

    def model_budget(self, call, target, version=None):
        b = budget_of(call, target, "model", True)
        return Budget(**{**vars(b), "fits": b.total <= b.limit})

    def fix_figures(self, problem, calls, target, scale):
        failed = {key(c) for c in problem.failing(target)}
        largest = max((block_bytes(op) for c in calls if key(c) in failed for op in blocks(c)), default=0)
        return largest, BLOCK_LIMIT

    def sweep_size(self, calls: Sequence[CapturedCall], target: str, version: str | None) -> SweepSize:
        costs = tuple(
            (c.name, tuple(sorted(("block", op.role, op.index, block_bytes(op)) for op in blocks(c)))) for c in calls
        )
        total = max((block_bytes(op) for c in calls for op in blocks(c)), default=0)
        return SweepSize(total, BLOCK_LIMIT, None, costs)

    def sweep_verdict(self, item, result):
        failing = [c for c in result.calls if not c.fits]
        if not failing:
            return Verdict(item.config, item.target, True, item.model_total, BLOCK_LIMIT, "compiler", "compiled")
        said = refusals(failing[0].compiler_text)
        if not said:
            return error_verdict(item, failing[0].compiler_text)
        return Verdict(item.config, item.target, False, max(s for _, _, s in said), BLOCK_LIMIT, "compiler", "compiled")


FAMILY = FakeFamily()
